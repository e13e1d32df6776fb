//! `stats`: per bridge, the datapath's counters, packets per engine, the
//! kernel engines' counters, every drop, the limits and the ports.

use super::Switch;
use crate::bridge::{Bridge, Limits, OffloadStatus};
use crate::control::proto::Response;
use serde_json::{json, Value};
use std::collections::BTreeMap;
use std::fmt::Write as _;

impl Switch {
    /// `stats`: counters only; nothing is reset.
    pub(super) fn stats(&self) -> Response {
        let mut text = String::new();
        let mut data = Vec::new();
        for (name, br) in &self.bridges {
            data.push(self.bridge_stats(name, br, &mut text));
        }
        Response::ok(text, json!(data))
    }

    /// One bridge's part of `stats`: its lines are appended to `text`, its
    /// `--json` entry returned.
    fn bridge_stats(&self, name: &str, br: &Bridge, text: &mut String) -> Value {
        let s = br.dp_stats();
        let _ = writeln!(text, "bridge {name}:");
        let _ = writeln!(
            text,
            "  datapath: packets:{} emc_hits:{} megaflow_hits:{} upcalls:{} flows:{} installed:{} removed:{} revalidations:{} (scoped:{})",
            s.packets,
            s.emc_hits,
            s.megaflow_hits,
            s.upcalls,
            br.n_dp_flows(),
            s.flows_installed,
            s.flows_removed,
            s.revalidations,
            s.scoped_revalidations
        );
        // Packets per engine: the userspace datapath saw `s.packets`
        // (misses of the XDP program included); the XDP program
        // finished `hit` frames in the kernel.
        let off = br.offload_status();
        let offload_json = match &off {
            Some(o) => offload_stats(br, o, s.packets, text),
            None => {
                let _ = writeln!(
                    text,
                    "  engines: userspace packets:{} (offload none)",
                    s.packets
                );
                json!({ "mode": "none" })
            }
        };
        let engines = json!({
            "xdp_packets": off.as_ref().map(|o| o.engine.hit).unwrap_or(0),
            "tc_packets": off.as_ref().and_then(|o| o.tc).map_or(0, |t| t.hit),
            "userspace_packets": s.packets,
        });
        // Every drop: userspace, kernel engines and ports (rings).
        let drops = br.drops();
        let _ = writeln!(
            text,
            "  drops: {}",
            if drops.is_empty() {
                "none".to_string()
            } else {
                drops
                    .iter()
                    .map(|(k, v)| format!("{k}:{v}"))
                    .collect::<Vec<_>>()
                    .join(" ")
            }
        );
        let cto = br.ct_offloads();
        let refused = cto
            .setup_refused
            .iter()
            .map(|(k, v)| format!(" {k}:{v}"))
            .collect::<String>();
        let prog = br.ct_program_stats();
        let _ = writeln!(
            text,
            "  conntrack in kernel: entries:{} set_up:{} installed:{} removed:{} \
             setup_timeouts:{} setup_xlates:{} bpf_set_up:{} bpf_undone:{} templates:{} \
             templates_written:{} templates_removed:{} prog_set_up:{} prog_ring_full:{} \
             prog_exists:{} prog_mismatch:{}{}",
            cto.len(),
            cto.set_up,
            cto.offloaded,
            cto.removed,
            cto.setup_timeouts,
            cto.setup_xlates,
            cto.bpf_set_up,
            cto.bpf_undone,
            cto.n_templates(),
            cto.templates_written,
            cto.templates_removed,
            prog[0],
            prog[1],
            prog[2],
            prog[3],
            refused
        );
        let ct_kernel = json!({
            "entries": cto.len(), "set_up": cto.set_up,
            "installed": cto.offloaded, "removed": cto.removed,
            "setup_timeouts": cto.setup_timeouts,
            "setup_xlates": cto.setup_xlates,
            "setup_refused": cto.setup_refused,
            "bpf_set_up": cto.bpf_set_up,
            "bpf_undone": cto.bpf_undone,
            "templates": cto.n_templates(),
            "templates_written": cto.templates_written,
            "templates_removed": cto.templates_removed,
            "prog_set_up": prog[0],
            "prog_ring_full": prog[1],
            "prog_exists": prog[2],
            "prog_mismatch": prog[3],
        });
        let limits_json = limits(&br.limits(), text);
        let mut ports = port_stats(br, text);
        // Configured ports whose interface is missing (see `tick`).
        if let Some(bc) = self.config.bridge(name) {
            let reps = bc.vfs.iter().map(|v| v.representor.as_str());
            for pname in bc.ports.iter().map(|p| p.name.as_str()).chain(reps) {
                if br.attached(pname).is_none() {
                    let _ = writeln!(text, "  port {pname}: not attached");
                    ports.push(json!({ "name": pname, "ofport": null, "attached": false }));
                }
            }
        }
        json!({
            "bridge": name,
            "datapath": {
                "packets": s.packets, "emc_hits": s.emc_hits,
                "megaflow_hits": s.megaflow_hits, "upcalls": s.upcalls,
                "flows": br.n_dp_flows(), "flows_installed": s.flows_installed,
                "flows_removed": s.flows_removed, "revalidations": s.revalidations,
                "scoped_revalidations": s.scoped_revalidations,
                "drops": drops,
            },
            "engines": engines,
            "ct_kernel": ct_kernel,
            "limits": limits_json,
            "offload": offload_json,
            "ports": ports,
        })
    }
}

/// The kernel engines' lines and entry, when offload is on.
fn offload_stats(
    br: &Bridge,
    o: &OffloadStatus,
    userspace_packets: u64,
    text: &mut String,
) -> Value {
    let e = &o.engine;
    let tc_hit = o.tc.map_or(0, |t| t.hit);
    let _ = writeln!(
        text,
        "  engines: tc packets:{} xdp packets:{} userspace packets:{}",
        tc_hit, e.hit, userspace_packets
    );
    if let Some(t) = &o.tc {
        let _ = writeln!(
            text,
            "  offload: tc flows:{} rx:{} hit:{} miss:{} unparsed:{} punt:{} output:{} drop:{} aborted:{} decap:{} encap:{} ports:{}",
            o.tc_flows,
            t.rx,
            t.hit,
            t.miss,
            t.unparsed,
            t.punt,
            t.output,
            t.drop,
            t.aborted,
            t.decap,
            t.encap,
            o.tc_ports.len()
        );
    }
    let _ = writeln!(
        text,
        "  offload: xdp flows:{} rx:{} hit:{} miss:{} unparsed:{} punt:{} output:{} drop:{} aborted:{} decap:{} encap:{}",
        o.xdp_flows,
        e.rx,
        e.hit,
        e.miss,
        e.unparsed,
        e.punt,
        e.output,
        e.drop,
        e.aborted,
        e.decap,
        e.encap,
    );
    // The manager's decisions cover both engines.
    let _ = writeln!(
        text,
        "  offload manager ({}): installed:{} modified:{} removed:{} refused:{}",
        br.offload_mode_name(),
        o.manager.installed,
        o.manager.modified,
        o.manager.removed,
        o.manager.refused
    );
    if !o.not_offloaded.is_empty() {
        let _ = writeln!(
            text,
            "  not offloaded: {}",
            o.not_offloaded
                .iter()
                .map(|(k, v)| format!("{k}:{v}"))
                .collect::<Vec<_>>()
                .join(" ")
        );
    }
    if let Some(p) = &o.profile {
        let _ = writeln!(
            text,
            "  emulated NIC {}: refused {}; resources {}",
            p.profile,
            p.refused
                .iter()
                .map(|(k, v)| format!("{k}:{v}"))
                .collect::<Vec<_>>()
                .join(" "),
            p.resources
                .iter()
                .filter(|(_, (used, _))| *used > 0)
                .map(|(k, (u, l))| format!("{k}:{u}/{l}"))
                .collect::<Vec<_>>()
                .join(" ")
        );
    }
    let profile_json = o.profile.as_ref().map(|p| {
        json!({
            "profile": p.profile,
            "refused": p.refused,
            "resources": p.resources.iter().map(|(k, (u, l))| (k.clone(), json!({"used": u, "limit": l}))).collect::<BTreeMap<_, _>>(),
        })
    });
    let tc_json = o.tc.map(|t| {
        json!({
            "flows": o.tc_flows,
            "rx": t.rx, "hit": t.hit, "miss": t.miss, "unparsed": t.unparsed,
            "no_port": t.no_port, "punt": t.punt, "output": t.output,
            "drop": t.drop, "aborted": t.aborted,
            "decap": t.decap, "encap": t.encap,
            "ports": o.tc_ports.iter().map(|(n, peer)| json!({
                "name": n, "redirect_peer": peer,
            })).collect::<Vec<_>>(),
        })
    });
    json!({
        "mode": br.offload_mode_name(),
        "tc": tc_json,
        "xdp_flows": o.xdp_flows,
        "flows": o.kernel_flows,
        "rx": e.rx, "hit": e.hit, "miss": e.miss, "unparsed": e.unparsed,
        "no_port": e.no_port, "punt": e.punt, "output": e.output,
        "drop": e.drop, "aborted": e.aborted,
        "decap": e.decap, "encap": e.encap,
        "installed": o.manager.installed, "modified": o.manager.modified,
        "removed": o.manager.removed, "refused": o.manager.refused,
        "ports": o.ports.iter().map(|(n, native, target)| json!({
            "name": n, "native": native, "redirect_target": target,
        })).collect::<Vec<_>>(),
        "not_offloaded": o.not_offloaded,
        "profile": profile_json,
    })
}

/// The limits line and entry: flows, kernel map, conntrack.
fn limits(l: &Limits, text: &mut String) -> Value {
    let kernel_map = match l.kernel_max_flows {
        Some(max) => format!(
            "kernel flows:{}/{max} refused_full:{}{} insert_errors:{}",
            l.kernel_flows,
            l.kernel_full,
            if l.kernel_map_full { " (full)" } else { "" },
            l.kernel_errors
        ),
        None => "kernel flows: (offload none)".to_string(),
    };
    let _ = writeln!(
        text,
        "  limits: flows:{}/{} flow_limit_hits:{}{}  {kernel_map}  conntrack:{}/{} ct_limit_hits:{}  rounds_deferred:{}",
        l.flows,
        l.flow_limit,
        l.flow_limit_hits,
        if l.flow_limit_reached {
            " (reached)"
        } else {
            ""
        },
        l.ct_connections,
        l.ct_limit,
        l.ct_limit_hits,
        l.rounds_deferred,
    );
    json!({
        "flow_limit": l.flow_limit, "flows": l.flows,
        "flow_limit_hits": l.flow_limit_hits,
        "kernel_max_flows": l.kernel_max_flows, "kernel_flows": l.kernel_flows,
        "kernel_refused_full": l.kernel_full, "kernel_insert_errors": l.kernel_errors,
        "ct_limit": l.ct_limit, "ct_connections": l.ct_connections,
        "ct_limit_hits": l.ct_limit_hits, "rounds_deferred": l.rounds_deferred,
        "flow_limit_reached": l.flow_limit_reached, "kernel_map_full": l.kernel_map_full,
    })
}

/// One line (and a line of its nonzero counters) and entry per attached
/// port.
fn port_stats(br: &Bridge, text: &mut String) -> Vec<Value> {
    let mut ports = Vec::new();
    for (pname, no, ps, extra) in br.port_stats_detailed() {
        let _ = writeln!(
            text,
            "  port {no} {pname}: rx pkts:{} bytes:{} drop:{}  tx pkts:{} bytes:{} drop:{}",
            ps.rx_packets, ps.rx_bytes, ps.rx_dropped, ps.tx_packets, ps.tx_bytes, ps.tx_dropped
        );
        let extra: BTreeMap<&str, u64> = extra.into_iter().collect();
        let nonzero: Vec<String> = extra
            .iter()
            .filter(|(_, v)| **v > 0)
            .map(|(k, v)| format!("{k}:{v}"))
            .collect();
        if !nonzero.is_empty() {
            let _ = writeln!(text, "    {}", nonzero.join(" "));
        }
        ports.push(json!({
            "counters": extra,
            "name": pname, "ofport": no,
            "rx_packets": ps.rx_packets, "rx_bytes": ps.rx_bytes, "rx_dropped": ps.rx_dropped,
            "tx_packets": ps.tx_packets, "tx_bytes": ps.tx_bytes, "tx_dropped": ps.tx_dropped,
        }));
    }
    ports
}
