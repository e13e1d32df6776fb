//! VFs: `add-vf` and `del-vf` (a veth pair whose far end sits in a
//! namespace, its near end the representor port), and a configured VF's
//! return at startup or when its namespace comes back.

use super::{open_port, Switch, SwitchError};
use crate::bridge::Bridge;
use crate::control::config::VfConfig;
use crate::control::proto::Response;
use crate::control::vf::{self, VfError, VfSpec};
use crate::offload::OffloadMode;
use serde_json::json;

/// Bring back a configured VF at startup: reuse its representor when it
/// still exists, else recreate the pair; then attach the representor.
pub(super) fn restore_vf(
    bridge: &str,
    br: &mut Bridge,
    vfc: &VfConfig,
    mode: OffloadMode,
) -> Result<(u32, &'static str), SwitchError> {
    if !vf::namespace_exists(&vfc.namespace) {
        return Err(SwitchError::NamespaceGone {
            bridge: bridge.to_string(),
            namespace: vfc.namespace.clone(),
            vf: vfc.name.clone(),
        });
    }
    if vf::link_exists(None, &vfc.representor) {
        tracing::info!(bridge, vf = %vfc.name, "reusing representor {}", vfc.representor);
        vf::prepare_representor(bridge, vfc)?;
    } else {
        tracing::info!(bridge, vf = %vfc.name, "recreating the veth pair of {}", vfc.representor);
        vf::create_pair(bridge, vfc)?;
    }
    let port = open_port(&vfc.port_config(), mode).map_err(SwitchError::OpenPort)?;
    let kind = port.kind();
    let no = br.add_port(port)?;
    Ok((no, kind))
}

impl Switch {
    /// `add-vf`: the request's tokens are checked first (the first bad one
    /// is named), then [`Switch::create_vf`].
    pub(super) fn add_vf(
        &mut self,
        bridge: String,
        namespace: String,
        name: Option<String>,
        mac: Option<String>,
        ips: Vec<String>,
        rep_type: Option<String>,
    ) -> Result<Response, SwitchError> {
        let spec = VfSpec::parse(
            &namespace,
            name.as_deref(),
            mac.as_deref(),
            &ips,
            rep_type.as_deref(),
        )?;
        self.create_vf(&bridge, spec)
    }

    pub(super) fn vf_by_representor(&self, bridge: &str, rep: &str) -> Option<&VfConfig> {
        self.config
            .bridge(bridge)?
            .vfs
            .iter()
            .find(|v| v.representor == rep)
    }

    /// The OpenFlow port number of `port` on `bridge`, if attached.
    pub(super) fn ofport(&self, bridge: &str, port: &str) -> Option<u32> {
        self.bridges.get(bridge).and_then(|b| b.attached(port))
    }

    pub(super) fn vf_json(&self, bridge: &str, v: &VfConfig) -> serde_json::Value {
        let no = self.ofport(bridge, &v.representor);
        json!({
            "index": v.index, "name": v.name, "namespace": v.namespace,
            "mac": v.mac, "ips": v.ips, "representor": v.representor,
            "rep_type": v.rep_type.as_str(),
            "port_kind": self.rep_kinds.get(&v.representor),
            "ofport": no, "flavour": "pcivf", "pfnum": 0, "vfnum": v.index,
        })
    }

    /// `add-vf`: every check first, then the pair, the port, the config; a
    /// failure at any step undoes the earlier ones.
    fn create_vf(&mut self, bridge: &str, spec: VfSpec) -> Result<Response, SwitchError> {
        let dup =
            |m: String| -> Result<Response, SwitchError> { Err(VfError::Duplicate(m).into()) };
        if !self.bridges.contains_key(bridge) {
            return Err(SwitchError::NoBridge(bridge.to_string()));
        }
        if !vf::namespace_exists(&spec.namespace) {
            return Err(VfError::UnknownNamespace(spec.namespace).into());
        }
        let existing = self
            .config
            .bridge(bridge)
            .map(|b| b.vfs.as_slice())
            .unwrap_or(&[]);
        let index = (0..=vf::MAX_VF_INDEX)
            .find(|i| !existing.iter().any(|v| v.index == *i))
            .ok_or_else(|| VfError::NoFreeIndex(bridge.to_string()))?;
        let name = spec.name.unwrap_or_else(|| vf::default_vf_name(index));
        // Interface names are per namespace (every CNI pod has an `eth0`),
        // so VF names are unique per bridge and namespace.
        if existing
            .iter()
            .any(|v| v.name == name && v.namespace == spec.namespace)
        {
            return dup(format!(
                "bridge {bridge} already has a VF `{name}` in namespace {}",
                spec.namespace
            ));
        }
        let representor = vf::representor_name(bridge, index);
        for bc in &self.config.bridges {
            if let Some(v) = bc.vfs.iter().find(|v| v.representor == representor) {
                return dup(format!(
                    "representor name `{representor}` is taken by VF {} of bridge {} (the bridge names' hashes collide; rename a bridge)",
                    v.name, bc.name
                ));
            }
        }
        if let Some(user) = self.config.iface_user(&representor, true) {
            return dup(format!(
                "interface `{representor}` is already attached as {user}"
            ));
        }
        if self.bridges[bridge].port_map().0.contains_key(&representor) {
            return dup(format!(
                "bridge {bridge} already has a port `{representor}`"
            ));
        }
        if vf::link_exists(None, &representor) {
            return dup(format!(
                "interface `{representor}` already exists in the daemon's namespace"
            ));
        }
        if vf::link_exists(Some(&spec.namespace), &name) {
            return dup(format!(
                "namespace {} already has an interface `{name}`",
                spec.namespace
            ));
        }
        let mac = spec.mac.unwrap_or_else(|| vf::default_mac(bridge, index));
        let vfc = VfConfig {
            name,
            index,
            namespace: spec.namespace,
            mac: vf::format_mac(&mac),
            ips: spec.ips,
            representor,
            rep_type: spec.rep_type,
        };
        vf::create_pair(bridge, &vfc).map_err(|source| SwitchError::VfPair {
            vf: vfc.name.clone(),
            source,
        })?;
        let undo = |e: SwitchError| {
            vf::delete_pair(&vfc.representor);
            e
        };
        let port = open_port(&vfc.port_config(), self.mode_of(bridge)).map_err(|reason| {
            undo(SwitchError::OpenRepresentor {
                representor: vfc.representor.clone(),
                reason,
            })
        })?;
        let kind = port.kind();
        let no = self
            .bridge(bridge)?
            .add_port(port)
            .map_err(|e| undo(e.into()))?;
        if let Some(bc) = self.config.bridge_mut(bridge) {
            bc.vfs.push(vfc.clone());
            bc.vfs.sort_by_key(|v| v.index);
        }
        self.rep_kinds.insert(vfc.representor.clone(), kind);
        if let Err(e) = self.persist() {
            if let Some(br) = self.bridges.get_mut(bridge) {
                let _ = br.del_port(&vfc.representor);
            }
            self.forget_vf(bridge, &vfc.representor);
            return Err(undo(e));
        }
        let text = format!(
            "VF {} (index {}) in namespace {}: mac {}, representor {} ({kind}) ofport {no}\n",
            vfc.name, vfc.index, vfc.namespace, vfc.mac, vfc.representor
        );
        Ok(Response::ok(text, self.vf_json(bridge, &vfc)))
    }

    fn forget_vf(&mut self, bridge: &str, representor: &str) {
        if let Some(bc) = self.config.bridge_mut(bridge) {
            bc.vfs.retain(|v| v.representor != representor);
        }
        self.rep_kinds.remove(representor);
    }

    /// `del-vf`: detach the representor, delete the pair, forget the VF.
    pub(super) fn del_vf(&mut self, bridge: &str, name: &str) -> Result<Response, SwitchError> {
        if !self.bridges.contains_key(bridge) {
            return Err(SwitchError::NoBridge(bridge.to_string()));
        }
        let vfs = self
            .config
            .bridge(bridge)
            .map(|b| b.vfs.as_slice())
            .unwrap_or(&[]);
        // A representor name is unique; a VF name may repeat across
        // namespaces, and then only the representor says which VF.
        let by_name: Vec<&VfConfig> = vfs.iter().filter(|v| v.name == name).collect();
        let vfc = match vfs.iter().find(|v| v.representor == name) {
            Some(v) => v.clone(),
            None if by_name.len() > 1 => {
                return Err(SwitchError::AmbiguousVf {
                    bridge: bridge.to_string(),
                    name: name.to_string(),
                    representors: by_name.iter().map(|v| v.representor.clone()).collect(),
                });
            }
            None => by_name
                .first()
                .map(|v| (*v).clone())
                .ok_or_else(|| SwitchError::NoVf {
                    bridge: bridge.to_string(),
                    name: name.to_string(),
                })?,
        };
        // Written first: a deletion the file cannot record is not made.
        if let Some(bc) = self.config.bridge_mut(bridge) {
            bc.vfs.retain(|v| v.representor != vfc.representor);
        }
        if let Err(e) = self.persist_without(Some((bridge, &vfc.representor))) {
            if let Some(bc) = self.config.bridge_mut(bridge) {
                bc.vfs.push(vfc.clone());
                bc.vfs.sort_by_key(|v| v.index);
            }
            return Err(e);
        }
        let br = self.bridge(bridge)?;
        if br.port_map().0.contains_key(&vfc.representor) {
            br.del_port(&vfc.representor)?;
        }
        vf::delete_pair(&vfc.representor);
        self.forget_vf(bridge, &vfc.representor);
        self.detached
            .remove(&(bridge.to_string(), vfc.representor.clone()));
        Ok(Response::ok("", json!(null)))
    }
}
