//! The hardware-profile engines (`nicflow-bf2`, `nicflow-cx7`, ... and
//! `nicflow-profile:NAME`): nicflow with its defaults except the bridge's
//! `offload=profile:NAME`, so the TC engine holds only the flows that NIC
//! model would (crates/hwprofile). An emulation on this host, not a
//! hardware measurement.
//!
//! What the overlay, conntrack, firewall and microservices benches report
//! for them and for `nicflow-tc`, read from the daemon's control socket:
//!
//! * the offloaded share: frames the kernel engines finished (`stats`:
//!   `engines.tc_packets` + `engines.xdp_packets`) over every frame through
//!   the switch (those plus `engines.userspace_packets`, the frames the
//!   userspace datapath received: a TC miss is counted there once, however
//!   many recirculations it takes), as the difference between a reading
//!   before and after the measured traffic ([`EngineCounts`]);
//! * the flows the profile refused: `dump-dp-flows` (JSON) entries whose
//!   `not_offloaded` starts with `NAME/`, with their reasons counted
//!   ([`Refusals`]).

use anyhow::{bail, Context};
use nicflow::control::proto::Request;
use serde::{Deserialize, Serialize};
use std::path::Path;

/// The NIC models of `offload=profile:NAME`: the product's own type.
pub use nicflow_hwprofile::Profile;

/// What the benches add to a profile: its `offload` value, its engine name
/// and lab tag, and the engine names that select it.
pub trait ProfileEngine: Sized {
    /// The bridge's `offload` value (`profile:bf2`).
    fn offload(self) -> &'static str;
    /// The engine's name in the benches (`nicflow-bf2`).
    fn engine_name(self) -> &'static str;
    /// One letter for lab names, unlike the overlay's (k, n, x, c, t) and
    /// the microservices' (t, u, k, o) engine tags.
    fn tag(self) -> &'static str;
    /// `nicflow-bf2`, `nicflow-profile:bf2` or `profile:bf2`.
    fn parse_engine(s: &str) -> Option<Self>;
}

impl ProfileEngine for Profile {
    fn offload(self) -> &'static str {
        nicflow_api::OffloadMode::Profile(self).as_str()
    }

    fn engine_name(self) -> &'static str {
        match self {
            Profile::Cx7 => "nicflow-cx7",
            Profile::Bf2 => "nicflow-bf2",
            Profile::Bf3 => "nicflow-bf3",
            Profile::Agilio => "nicflow-agilio",
        }
    }

    fn tag(self) -> &'static str {
        match self {
            Profile::Cx7 => "m",
            Profile::Bf2 => "b",
            Profile::Bf3 => "f",
            Profile::Agilio => "g",
        }
    }

    fn parse_engine(s: &str) -> Option<Profile> {
        let s = s.trim();
        let name = s
            .strip_prefix("nicflow-profile:")
            .or_else(|| s.strip_prefix("profile:"))
            .or_else(|| s.strip_prefix("nicflow-"))?;
        Profile::parse(name)
    }
}

/// Frames per engine of one bridge, from `stats` (JSON), or the difference
/// of two readings.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct EngineCounts {
    pub tc: u64,
    pub xdp: u64,
    pub userspace: u64,
}

impl EngineCounts {
    /// `bridge`'s `engines` entry in `stats --json`.
    pub fn from_stats(data: &serde_json::Value, bridge: &str) -> Option<EngineCounts> {
        let b = data
            .as_array()?
            .iter()
            .find(|b| b["bridge"].as_str() == Some(bridge))?;
        let e = &b["engines"];
        Some(EngineCounts {
            tc: e["tc_packets"].as_u64().unwrap_or(0),
            xdp: e["xdp_packets"].as_u64().unwrap_or(0),
            userspace: e["userspace_packets"].as_u64()?,
        })
    }

    /// What happened between `before` and `self` (counters only grow; a
    /// restart reads as zero).
    pub fn since(self, before: EngineCounts) -> EngineCounts {
        EngineCounts {
            tc: self.tc.saturating_sub(before.tc),
            xdp: self.xdp.saturating_sub(before.xdp),
            userspace: self.userspace.saturating_sub(before.userspace),
        }
    }

    pub fn plus(self, o: EngineCounts) -> EngineCounts {
        EngineCounts {
            tc: self.tc + o.tc,
            xdp: self.xdp + o.xdp,
            userspace: self.userspace + o.userspace,
        }
    }

    pub fn kernel(self) -> u64 {
        self.tc + self.xdp
    }

    pub fn total(self) -> u64 {
        self.kernel() + self.userspace
    }

    /// Kernel-finished frames over all frames, 0..1 (None: no frames).
    pub fn kernel_share(self) -> Option<f64> {
        (self.total() > 0).then(|| self.kernel() as f64 / self.total() as f64)
    }
}

/// `dump-dp-flows --json` of one bridge, summarised.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Refusals {
    /// Datapath flows (megaflows, not the `established:` entries).
    pub flows: usize,
    /// Of those, in a kernel engine; plus established-connection entries.
    pub kernel_flows: usize,
    pub established: usize,
    /// Flows the profile refused (`not_offloaded` starting `NAME/`).
    pub refused: usize,
    /// Every `not_offloaded` reason with its flow count, most first.
    pub reasons: Vec<(String, usize)>,
}

impl Refusals {
    pub fn from_dp_flows(data: &serde_json::Value, profile: Option<Profile>) -> Refusals {
        let mut r = Refusals::default();
        let mut reasons: std::collections::BTreeMap<String, usize> = Default::default();
        for f in data.as_array().into_iter().flatten() {
            if f["match"]
                .as_str()
                .is_some_and(|m| m.starts_with("established:"))
            {
                r.established += 1;
                continue;
            }
            r.flows += 1;
            let engine = f["engine"].as_str().unwrap_or("");
            if engine != "userspace" && !engine.is_empty() {
                r.kernel_flows += 1;
            }
            if let Some(why) = f["not_offloaded"].as_str() {
                if profile.is_some_and(|p| why.starts_with(&format!("{}/", p.name()))) {
                    r.refused += 1;
                }
                *reasons.entry(why.to_string()).or_default() += 1;
            }
        }
        r.reasons = reasons.into_iter().collect();
        r.reasons.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(&b.0)));
        r
    }

    /// Several readings of one lab: the largest counts seen, each reason
    /// at its largest count.
    pub fn merge(all: &[&Refusals]) -> Refusals {
        let mut r = Refusals::default();
        let mut reasons: std::collections::BTreeMap<String, usize> = Default::default();
        for x in all {
            r.flows = r.flows.max(x.flows);
            r.kernel_flows = r.kernel_flows.max(x.kernel_flows);
            r.established = r.established.max(x.established);
            r.refused = r.refused.max(x.refused);
            for (k, n) in &x.reasons {
                let e = reasons.entry(k.clone()).or_default();
                *e = (*e).max(*n);
            }
        }
        r.reasons = reasons.into_iter().collect();
        r.reasons.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(&b.0)));
        r
    }

    /// Two bridges' flows (two nodes of one lab) together.
    pub fn add(&self, o: &Refusals) -> Refusals {
        let mut reasons: std::collections::BTreeMap<String, usize> = Default::default();
        for (k, n) in self.reasons.iter().chain(&o.reasons) {
            *reasons.entry(k.clone()).or_default() += n;
        }
        let mut reasons: Vec<(String, usize)> = reasons.into_iter().collect();
        reasons.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(&b.0)));
        Refusals {
            flows: self.flows + o.flows,
            kernel_flows: self.kernel_flows + o.kernel_flows,
            established: self.established + o.established,
            refused: self.refused + o.refused,
            reasons,
        }
    }

    /// The report's "refused by profile" cell: [`Refusals::cell`] for a
    /// profile engine or one with userspace reasons, `—` otherwise.
    pub fn profile_cell(&self, profiled: bool) -> String {
        if profiled || !self.reasons.is_empty() {
            self.cell(3)
        } else {
            "—".into()
        }
    }

    /// `N: reason (k); reason (k)` with the `top` most frequent reasons,
    /// for a report cell (`|` escaped).
    pub fn cell(&self, top: usize) -> String {
        let mut s = self.refused.to_string();
        let reasons: Vec<String> = self
            .reasons
            .iter()
            .take(top)
            .map(|(w, n)| format!("{w} ({n})"))
            .collect();
        if !reasons.is_empty() {
            s.push_str(": ");
            s.push_str(&reasons.join("; "));
        }
        s.replace('|', "\\|")
    }
}

/// What a bench records per measurement for a nicflow engine.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct OffloadSample {
    /// Frames per engine during the measurement.
    pub frames: EngineCounts,
    /// The datapath flows right after it.
    pub dp: Refusals,
}

/// Several samples: frames summed, flows merged.
pub fn combine(all: &[&OffloadSample]) -> Option<OffloadSample> {
    if all.is_empty() {
        return None;
    }
    let frames = all
        .iter()
        .fold(EngineCounts::default(), |a, s| a.plus(s.frames));
    let dp = Refusals::merge(&all.iter().map(|s| &s.dp).collect::<Vec<_>>());
    Some(OffloadSample { frames, dp })
}

/// A share as a percentage cell.
pub fn pct(share: Option<f64>) -> String {
    share
        .map(|s| format!("{:.1}%", 100.0 * s))
        .unwrap_or_else(|| "—".into())
}

fn request(sock: &Path, req: &Request) -> anyhow::Result<serde_json::Value> {
    let r = nicflow::control::daemon::request(sock, req)?;
    if !r.ok {
        bail!("{}", r.error.unwrap_or_else(|| "failed".into()));
    }
    Ok(r.data)
}

/// `stats` of `bridge` on the daemon at `sock`.
pub fn read_counts(sock: &Path, bridge: &str) -> anyhow::Result<EngineCounts> {
    let d = request(sock, &Request::Stats)?;
    EngineCounts::from_stats(&d, bridge).with_context(|| format!("no bridge {bridge} in stats"))
}

/// `dump-dp-flows bridge` on the daemon at `sock`.
pub fn read_refusals(
    sock: &Path,
    bridge: &str,
    profile: Option<Profile>,
) -> anyhow::Result<Refusals> {
    let d = request(
        sock,
        &Request::DumpDpFlows {
            bridge: bridge.into(),
        },
    )?;
    Ok(Refusals::from_dp_flows(&d, profile))
}

/// The reading after a measurement: frames since `before` (summed over
/// several daemons by the caller) and the flows now.
pub fn sample_after(
    sock: &Path,
    bridge: &str,
    profile: Option<Profile>,
    before: EngineCounts,
) -> anyhow::Result<OffloadSample> {
    Ok(OffloadSample {
        frames: read_counts(sock, bridge)?.since(before),
        dp: read_refusals(sock, bridge, profile)?,
    })
}

/// [`sample_after`] over several daemons (the nodes of one lab), summed.
pub fn sample_all(
    socks: &[&Path],
    bridge: &str,
    profile: Option<Profile>,
    before: &[EngineCounts],
) -> anyhow::Result<OffloadSample> {
    let mut o = OffloadSample::default();
    for (sock, b) in socks.iter().zip(before) {
        let x = sample_after(sock, bridge, profile, *b)?;
        o.frames = o.frames.plus(x.frames);
        o.dp = o.dp.add(&x.dp);
    }
    Ok(o)
}

/// [`read_counts`] of several daemons.
pub fn read_all(socks: &[&Path], bridge: &str) -> anyhow::Result<Vec<EngineCounts>> {
    socks.iter().map(|s| read_counts(s, bridge)).collect()
}

/// The report paragraph saying what the columns mean.
pub const METHOD: &str = "*offloaded*: frames the kernel engines finished over all frames \
through the switch during the measured runs (`stats`: `engines.tc_packets + xdp_packets` over \
that plus `userspace_packets`, difference of readings before and after each run, summed over \
the repetitions and nodes). *refused*: datapath flows whose `not_offloaded` (in `dump-dp-flows \
--json`, read after each run) starts with the profile's name: the flows the modelled NIC would \
not hold, with the most frequent reasons of all userspace flows (largest count seen in one \
reading). `nicflow-NAME` engines are nicflow's TC engine restricted to what that NIC would \
hold (`offload=profile:NAME`): an emulation on this host, not a hardware measurement.";

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn engine_names() {
        assert_eq!(Profile::parse_engine("nicflow-bf2"), Some(Profile::Bf2));
        assert_eq!(Profile::parse_engine(" nicflow-cx7 "), Some(Profile::Cx7));
        assert_eq!(
            Profile::parse_engine("nicflow-profile:agilio"),
            Some(Profile::Agilio)
        );
        assert_eq!(Profile::parse_engine("profile:bf3"), Some(Profile::Bf3));
        assert_eq!(Profile::parse_engine("nicflow-tc"), None);
        assert_eq!(Profile::parse_engine("nicflow-profile:bf4"), None);
        assert_eq!(Profile::parse_engine("bf2"), None);
        for p in Profile::ALL {
            assert_eq!(Profile::parse_engine(p.engine_name()), Some(p));
            assert_eq!(p.offload(), format!("profile:{}", p.name()));
            assert_eq!(Profile::parse_engine(p.offload()), Some(p));
        }
        assert_eq!(serde_json::to_string(&Profile::Bf2).unwrap(), "\"bf2\"");
    }

    #[test]
    fn counts_from_stats() {
        let d = json!([
            {"bridge": "br1", "engines": {"tc_packets": 1, "xdp_packets": 0, "userspace_packets": 2}},
            {"bridge": "br0", "engines": {"tc_packets": 900, "xdp_packets": 0, "userspace_packets": 100}},
        ]);
        let c = EngineCounts::from_stats(&d, "br0").unwrap();
        assert_eq!(c.total(), 1000);
        assert_eq!(c.kernel_share(), Some(0.9));
        let before = EngineCounts {
            tc: 400,
            xdp: 0,
            userspace: 100,
        };
        let d = c.since(before);
        assert_eq!((d.tc, d.userspace), (500, 0));
        assert_eq!(d.kernel_share(), Some(1.0));
        assert_eq!(EngineCounts::default().kernel_share(), None);
        assert!(EngineCounts::from_stats(&d_none(), "br0").is_none());
        assert_eq!(pct(Some(0.1234)), "12.3%");
        assert_eq!(pct(None), "—");
    }

    fn d_none() -> serde_json::Value {
        json!([{"bridge": "br9", "engines": {}}])
    }

    #[test]
    fn refusals_from_dump() {
        let d = json!([
            {"match": "recirc_id(0),in_port(p1),ip", "engine": "userspace", "packets": 10,
             "kernel_packets": 0, "not_offloaded": "bf2/driver: ct action not supported, x"},
            {"match": "recirc_id(0),in_port(p2),ip", "engine": "userspace", "packets": 10,
             "kernel_packets": 0, "not_offloaded": "bf2/driver: ct action not supported, x"},
            {"match": "recirc_id(1),arp", "engine": "tc", "packets": 5, "kernel_packets": 4,
             "not_offloaded": null},
            {"match": "recirc_id(0),in_port(p3)", "engine": "userspace", "packets": 1,
             "kernel_packets": 0, "not_offloaded": "slow-path action"},
            {"match": "established:tcp,nw_src=1.2.3.4", "engine": "tc", "packets": 99,
             "kernel_packets": 99, "not_offloaded": null},
        ]);
        let r = Refusals::from_dp_flows(&d, Some(Profile::Bf2));
        assert_eq!(
            (r.flows, r.kernel_flows, r.established, r.refused),
            (4, 1, 1, 2)
        );
        assert_eq!(
            r.reasons,
            vec![
                ("bf2/driver: ct action not supported, x".to_string(), 2),
                ("slow-path action".to_string(), 1)
            ]
        );
        assert_eq!(r.cell(1), "2: bf2/driver: ct action not supported, x (2)");
        // Without a profile nothing counts as refused by one.
        assert_eq!(Refusals::from_dp_flows(&d, None).refused, 0);
        assert_eq!(Refusals::from_dp_flows(&d, Some(Profile::Cx7)).refused, 0);
        let m = Refusals::merge(&[&r, &Refusals::from_dp_flows(&json!([]), None)]);
        assert_eq!(m, r);
        let two = r.add(&r);
        assert_eq!((two.flows, two.refused, two.established), (8, 4, 2));
        assert_eq!(two.reasons[0].1, 4);
        let s = OffloadSample {
            frames: EngineCounts {
                tc: 1,
                xdp: 0,
                userspace: 3,
            },
            dp: r.clone(),
        };
        let c = combine(&[&s, &s]).unwrap();
        assert_eq!(c.frames.total(), 8);
        assert_eq!(c.dp, r);
        assert!(combine(&[]).is_none());
        let pipe = Refusals {
            refused: 1,
            reasons: vec![("a|b".into(), 1)],
            ..Default::default()
        };
        assert_eq!(pipe.cell(3), "1: a\\|b (1)");
    }
}
