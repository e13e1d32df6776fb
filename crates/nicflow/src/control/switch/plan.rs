//! `offload-plan BR --profile NAME`: which of a bridge's datapath flows a
//! SmartNIC would hold, had Open vSwitch 3.1 installed them with
//! hw-offload on, the NIC's resources, and what that predicts for the
//! traffic the flows counted. Changes nothing.
//!
//! The verdicts come from `nicflow_hwprofile` (OVS's TC gate, the driver,
//! its resources) over the flows as `dataplane::offload::profile` puts
//! them in OVS's form. The prediction (docs/offload-plan.md) is a model:
//! the flows' own counters say which packets the NIC would have carried;
//! nicflow's per-packet costs measured in this daemon say what the host
//! spent on them; the hardware's rates are published figures with their
//! sources.

use super::{Switch, SwitchError};
use crate::control::proto::Response;
use nicflow_dataplane::bridge::{PlanFlow, PlanInput};
use nicflow_hwprofile::{plan::FlowVerdict, Profile};
use serde_json::json;
use std::collections::BTreeMap;
use std::fmt::Write as _;

/// The share of a flow's packets the NIC would carry: 0 when refused; for
/// a flow that recirculates, the share its recirculations' flows carry
/// (packet-weighted); a `ct` flow only for the connections the NIC's
/// conntrack table holds.
fn carried(flows: &[PlanFlow], verdicts: &[FlowVerdict], ct_share: f64) -> Vec<f64> {
    use std::collections::HashMap;
    // Flows by recirc_id, and each recirculation's carried share
    // (packet-weighted), computed once; a cycle (impossible in a datapath,
    // but the input is not trusted) counts as not carried.
    let mut by_recirc: HashMap<u32, Vec<usize>> = HashMap::new();
    for (i, f) in flows.iter().enumerate() {
        by_recirc.entry(f.recirc_id).or_default().push(i);
    }
    struct Ctx<'a> {
        flows: &'a [PlanFlow],
        verdicts: &'a [FlowVerdict],
        ct_share: f64,
        by_recirc: HashMap<u32, Vec<usize>>,
        flow_memo: HashMap<usize, f64>,
        recirc_memo: HashMap<u32, f64>,
        visiting: std::collections::HashSet<u32>,
    }
    fn flow_share(c: &mut Ctx, i: usize) -> f64 {
        if let Some(v) = c.flow_memo.get(&i) {
            return *v;
        }
        let f = &c.flows[i];
        let mut s = if c.verdicts[i].offloadable { 1.0 } else { 0.0 };
        if s > 0.0
            && f.converted
                .flow
                .actions
                .iter()
                .any(|a| matches!(a, nicflow_hwprofile::model::DpAction::Ct(_)))
        {
            s *= c.ct_share;
        }
        if s > 0.0 {
            for id in f.recircs.clone() {
                s *= recirc_share(c, id);
            }
        }
        c.flow_memo.insert(i, s);
        s
    }
    fn recirc_share(c: &mut Ctx, id: u32) -> f64 {
        if let Some(v) = c.recirc_memo.get(&id) {
            return *v;
        }
        if !c.visiting.insert(id) {
            return 0.0;
        }
        let members = c.by_recirc.get(&id).cloned().unwrap_or_default();
        let (mut num, mut den) = (0.0, 0.0);
        for j in members {
            let p = c.flows[j].packets as f64;
            den += p;
            num += p * flow_share(c, j);
        }
        c.visiting.remove(&id);
        let v = if den > 0.0 { num / den } else { 0.0 };
        c.recirc_memo.insert(id, v);
        v
    }
    let mut c = Ctx {
        flows,
        verdicts,
        ct_share,
        by_recirc,
        flow_memo: HashMap::new(),
        recirc_memo: HashMap::new(),
        visiting: Default::default(),
    };
    (0..flows.len()).map(|i| flow_share(&mut c, i)).collect()
}

/// Packets a tick must have seen in userspace for its CPU to count as a
/// per-packet cost (below it, the daemon's fixed work per tick dominates).
const COST_MIN_PACKETS: u64 = 1000;

/// nicflow's own cost per userspace packet on this host: the daemon's CPU
/// time over the packets its userspace datapaths handled, between two
/// ticks (one second) that saw at least [`COST_MIN_PACKETS`]. All of the
/// daemon's work in that second counts (upcalls, revalidation, ticks), as
/// all of it is what an offloaded packet would no longer cost.
#[derive(Default)]
pub struct CostSampler {
    last: Option<(f64, u64)>,
    /// The latest such second's cost, and the packets it saw.
    pub ns_per_packet: Option<(f64, u64)>,
}

impl CostSampler {
    pub fn sample(&mut self, cpu_s: f64, packets: u64) {
        if let Some((c0, p0)) = self.last {
            let n = packets.saturating_sub(p0);
            if n >= COST_MIN_PACKETS {
                self.ns_per_packet = Some(((cpu_s - c0).max(0.0) * 1e9 / n as f64, n));
            }
        }
        self.last = Some((cpu_s, packets));
    }
}

/// The daemon's CPU time so far (user + system), seconds.
pub(super) fn process_cpu_s() -> f64 {
    // SAFETY: getrusage writes the struct it is given.
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    if unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut ru) } != 0 {
        return 0.0;
    }
    let tv = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 / 1e6;
    tv(ru.ru_utime) + tv(ru.ru_stime)
}

fn pct(a: f64, b: f64) -> f64 {
    if b > 0.0 {
        100.0 * a / b
    } else {
        0.0
    }
}

impl Switch {
    pub(super) fn offload_plan(
        &mut self,
        bridge: &str,
        profile: &str,
    ) -> Result<Response, SwitchError> {
        let p = Profile::parse(profile)
            .ok_or_else(|| SwitchError::UnknownProfile(profile.to_string()))?;
        let us_cost = self.cost.ns_per_packet;
        let br = self.bridge(bridge)?;
        br.sync_offload();
        let input: PlanInput = br.offload_plan_input();
        let ports: Vec<_> = input.ports.iter().map(|m| m.port.clone()).collect();
        let dp: Vec<_> = input
            .flows
            .iter()
            .map(|f| f.converted.flow.clone())
            .collect();
        let plan = nicflow_hwprofile::plan(p, &ports, &dp, input.ct_connections);
        let ct_share = if input.ct_connections > 0 {
            plan.ct_offloaded as f64 / input.ct_connections as f64
        } else {
            1.0
        };
        let share = carried(&input.flows, &plan.flows, ct_share);

        // Each packet once: the flows of its first pass.
        let (mut pk, mut by, mut pk_nic, mut by_nic) = (0.0, 0.0, 0.0, 0.0);
        let (mut us_pk, mut k_pk, mut us_pk_nic, mut k_pk_nic) = (0.0, 0.0, 0.0, 0.0);
        for (f, s) in input.flows.iter().zip(&share) {
            if f.recirc_id != 0 {
                continue;
            }
            let (p_, b_) = (f.packets as f64, f.bytes as f64);
            pk += p_;
            by += b_;
            pk_nic += p_ * s;
            by_nic += b_ * s;
            let k = (f.kernel_packets as f64).min(p_);
            let u = (p_ - k).max(0.0);
            us_pk += u;
            k_pk += k;
            us_pk_nic += u * s;
            k_pk_nic += k * s;
        }
        let us_ns = us_cost.map(|(ns, _)| ns);
        let k_ns = nicflow_dataplane::offload::kernel::runstats::tc_dp_ns_per_run();
        let host_s =
            |u: f64, k: f64| u * us_ns.unwrap_or(0.0) / 1e9 + k * k_ns.unwrap_or(0.0) / 1e9;
        let (host_now, host_freed) = (host_s(us_pk, k_pk), host_s(us_pk_nic, k_pk_nic));

        let mut text = String::new();
        let _ = writeln!(
            text,
            "offload-plan {bridge} --profile {}: {} (model: {})",
            p.name(),
            p.describe(),
            nicflow_hwprofile::MODELLED
        );
        let mut flows_json = Vec::new();
        for (f, v) in input.flows.iter().zip(&plan.flows) {
            if v.offloadable {
                let _ = writeln!(text, "{} -> offload", f.matching);
            } else {
                let _ = writeln!(text, "{} -> refused: {}", f.matching, v.reason);
            }
            for n in &f.converted.notes {
                let _ = writeln!(text, "    note: {n}");
            }
            flows_json.push(json!({
                "match": f.matching,
                "actions": f.actions,
                "offloadable": v.offloadable,
                "reason": v.reason,
                "stage": v.stage.map(|s| s.as_str()),
                "source": v.source,
                "packets": f.packets,
                "bytes": f.bytes,
                "notes": f.converted.notes,
            }));
        }
        let held = plan.flows.iter().filter(|v| v.offloadable).count();
        let _ = writeln!(text, "flows: {held} of {} would be held", plan.flows.len());
        let _ = writeln!(text, "resources ({}):", plan.driver);
        for (name, r) in &plan.resources {
            let _ = writeln!(text, "  {name}: {} / {}", r.used, r.limit);
        }
        let _ = writeln!(
            text,
            "conntrack: {} connections tracked, {} would be held in the NIC's table",
            input.ct_connections, plan.ct_offloaded
        );
        let _ = writeln!(
            text,
            "predicted gain (a model, not a measurement; docs/offload-plan.md):"
        );
        let _ = writeln!(
            text,
            "  packets on the NIC: {:.1}% ({:.0} of {:.0}), bytes {:.1}%",
            pct(pk_nic, pk),
            pk_nic,
            pk,
            pct(by_nic, by)
        );
        let cost = |v: Option<f64>, why: &str| {
            v.map(|n| format!("{n:.0} ns/packet"))
                .unwrap_or_else(|| format!("not measured ({why})"))
        };
        let _ = writeln!(
            text,
            "  host cost measured here: userspace {} ({:.0} packets), TC engine {} ({:.0} packets; \
             per program run: a GSO super-frame is one run, so an upper bound per packet)",
            cost(us_ns, "no second with 1000 userspace packets yet"),
            us_pk,
            cost(k_ns, "sysctl kernel.bpf_stats_enabled=1 to measure it"),
            k_pk
        );
        let _ = writeln!(
            text,
            "  host CPU for these packets: {host_now:.3} s; the NIC would free {host_freed:.3} s ({:.1}%)",
            pct(host_freed, host_now)
        );
        let figures: Vec<_> = nicflow_hwprofile::rates::for_profile(p).collect();
        let _ = writeln!(text, "  published figures ({}):", figures.len());
        for fig in &figures {
            let _ = writeln!(
                text,
                "    {}: {} {} ({}) [{}]",
                fig.metric, fig.value, fig.unit, fig.conditions, fig.source
            );
        }
        let resources: BTreeMap<_, _> = plan
            .resources
            .iter()
            .map(|(k, r)| (k.clone(), json!({"used": r.used, "limit": r.limit})))
            .collect();
        let data = json!({
            "bridge": bridge,
            "profile": p.name(),
            "model": nicflow_hwprofile::MODELLED,
            "flows": flows_json,
            "resources": resources,
            "conntrack": {"connections": input.ct_connections, "held": plan.ct_offloaded},
            "prediction": {
                "packets": pk, "packets_on_nic": pk_nic,
                "bytes": by, "bytes_on_nic": by_nic,
                "userspace_ns_per_packet": us_ns,
                "tc_ns_per_packet": k_ns,
                "host_cpu_s": host_now,
                "host_cpu_freed_s": host_freed,
                "published": figures,
            },
        });
        Ok(Response::ok(text, data))
    }
}
