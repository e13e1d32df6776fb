//! Writing the config file, and undoing a change it cannot record: a
//! request is acknowledged only once the file says what the switch runs.

use super::{now, Switch, SwitchError};
use crate::bridge::Bridge;
use crate::control::config::Config;

impl Switch {
    /// Write the current state to the config file (when there is one).
    /// Rules added over OpenFlow are written too; the fail-open rule
    /// (`control::openflow::FAIL_OPEN_COOKIE`) never is.
    pub(super) fn persist(&mut self) -> Result<(), SwitchError> {
        self.persist_without(None)
    }

    /// [`Switch::persist`], with the rules written as if port `hide`
    /// (bridge, port) were already gone: a deletion is written before it is
    /// made, in the words the file will have after it.
    pub(super) fn persist_without(
        &mut self,
        hide: Option<(&str, &str)>,
    ) -> Result<(), SwitchError> {
        for bc in self.config.bridges.iter_mut() {
            if let Some(br) = self.bridges.get_mut(&bc.name) {
                let mut names = br.port_map().clone();
                if let Some((_, port)) = hide.filter(|(b, _)| *b == bc.name) {
                    names.0.remove(port);
                }
                let fail_open = self.openflow.fail_open(&bc.name);
                // Meters, then groups, then rules: each loads before what
                // names it.
                bc.flows = br
                    .dump_meters()
                    .iter()
                    .map(nicflow_ofctl::meter::format_meter_spec)
                    .collect();
                bc.flows.extend(br.dump_groups_text());
                bc.flows.extend(
                    br.dump_flows(now())
                        .iter()
                        .filter(|d| {
                            !(fail_open
                                && d.spec.cookie == crate::control::openflow::FAIL_OPEN_COOKIE
                                && d.spec.priority == 0
                                && d.spec.table == 0)
                        })
                        .map(|d| nicflow_ofctl::format_flow(&d.spec, &names)),
                );
            }
        }
        if let Some(p) = &self.config_path {
            self.config.save(p).map_err(SwitchError::NotWritten)?;
        }
        self.of_dirty = false;
        self.expired_written = self
            .bridges
            .iter()
            .map(|(n, b)| (n.clone(), b.ofproto_stats().rules_expired))
            .collect();
        Ok(())
    }

    /// Run `change` on bridge `bridge`'s rules, groups or meters and write
    /// the config file; when the file cannot be written the bridge gets its
    /// rules back as they were (counters included), so the switch never
    /// runs what the file does not say and the request fails.
    pub(super) fn change_rules<T>(
        &mut self,
        bridge: &str,
        change: impl FnOnce(&mut Bridge) -> Result<T, SwitchError>,
    ) -> Result<T, SwitchError> {
        let keep = self.config_path.is_some();
        let br = self.bridge(bridge)?;
        let saved = keep.then(|| br.save_rules());
        let out = change(br)?;
        if let Err(e) = self.persist() {
            if let (Some(s), Some(br)) = (saved, self.bridges.get_mut(bridge)) {
                br.restore_rules(s, now());
            }
            return Err(e);
        }
        Ok(out)
    }

    /// What [`Switch::persist_or_undo`] needs to put a request on bridge `bridge` back:
    /// the configuration and the bridge's rules (only when there is a file
    /// to fail writing).
    pub(super) fn checkpoint(
        &mut self,
        bridge: &str,
    ) -> Option<(Config, crate::ofproto::RuleState)> {
        self.config_path.as_ref()?;
        let rules = self.bridges.get_mut(bridge)?.save_rules();
        Some((self.config.clone(), rules))
    }

    /// Write the config file; when that fails, put back what
    /// [`Switch::checkpoint`] saved (configuration, rules, controllers) and
    /// fail.
    pub(super) fn persist_or_undo(
        &mut self,
        bridge: &str,
        saved: Option<(Config, crate::ofproto::RuleState)>,
    ) -> Result<(), SwitchError> {
        let Err(e) = self.persist() else {
            return Ok(());
        };
        if let Some((config, rules)) = saved {
            self.config = config;
            if let Some(br) = self.bridges.get_mut(bridge) {
                br.restore_rules(rules, now());
            }
            if let Err(c) = self.of_configure(bridge) {
                tracing::warn!(bridge, "restoring the controllers: {c}");
            }
        }
        Err(e)
    }
}
