//! Pod bandwidth limits enforced by the bridge: OpenFlow meters on the
//! pod's traffic, because the reference `bandwidth` plugin's qdiscs sit
//! beside the VF model's data path (docs/cni.md, "Chaining": its egress
//! limit never acts and its ingress limit only for frames the TC engine
//! forwards in the kernel). The keys are the `bandwidth` capability's, the
//! ones runtimes already send (`runtimeConfig.bandwidth`, bits/s and bits):
//! `ingressRate`/`ingressBurst` (into the pod), `egressRate`/`egressBurst`
//! (out of it); or `bandwidth` in the network configuration for every pod.
//!
//! Each direction is one meter (kbit/s, one drop band) whose id ADD finds
//! free on the bridge, and the rules that name it carry the attachment's
//! cookie, so DEL finds the meters again from the rules themselves:
//!
//! ```text
//! table 0 prio 150 dl_dst=MAC   meter:I,normal   into the pod (without a policy also IP;
//!                                                with one, its table 40 rules name meter:I)
//! table 0 prio 90  in_port=R    meter:E,normal   out of the pod (with a policy its IP rule
//!                                                at prio 100 names meter:E)
//! ```
//!
//! One rule decides a packet in table 0, so between two limited pods on
//! one bridge the receiver's ingress meter applies and the sender's egress
//! meter does not (its rule has the lower priority).

use super::error::{CniError, CniResult};
use serde_json::Value;

/// One direction's limit.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Rate {
    /// Bits per second.
    pub bps: u64,
    /// Bucket size in bits; `None`: one second's worth (the meter default).
    pub burst_bits: Option<u64>,
}

impl Rate {
    /// The `add-meter` text of meter `id` with this limit.
    pub fn meter_spec(&self, id: u32) -> String {
        let kbps = self.bps.div_ceil(1000).max(1);
        match self.burst_bits {
            Some(b) => format!(
                "meter={id},kbps,burst,bands=type=drop,rate={kbps},burst_size={}",
                b.div_ceil(1000).max(1)
            ),
            None => format!("meter={id},kbps,bands=type=drop,rate={kbps}"),
        }
    }
}

/// The pod's limits; at least one direction is set.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Bandwidth {
    pub ingress: Option<Rate>,
    pub egress: Option<Rate>,
}

/// The meter ids of one attachment's limits.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Meters {
    pub ingress: Option<u32>,
    pub egress: Option<u32>,
}

impl Meters {
    /// `meter:N,` for the ingress direction, or nothing.
    pub fn ingress_prefix(&self) -> String {
        self.ingress
            .map_or(String::new(), |m| format!("meter:{m},"))
    }

    pub fn egress_prefix(&self) -> String {
        self.egress.map_or(String::new(), |m| format!("meter:{m},"))
    }
}

fn bad(path: &str, why: impl std::fmt::Display) -> CniError {
    CniError::invalid_config(format!("network config: `{path}`: {why}"))
}

fn num(o: &serde_json::Map<String, Value>, path: &str, key: &str) -> CniResult<Option<u64>> {
    match o.get(key) {
        None | Some(Value::Null) => Ok(None),
        Some(v) => v
            .as_u64()
            .filter(|n| *n > 0)
            .map(Some)
            .ok_or_else(|| bad(&format!("{path}.{key}"), format!("{v}: a positive integer"))),
    }
}

impl Bandwidth {
    /// `runtimeConfig.bandwidth` if given, else the network's `bandwidth`;
    /// `None` when neither limits anything.
    pub fn from_conf(
        conf: Option<&Value>,
        runtime: Option<&Value>,
    ) -> CniResult<Option<Bandwidth>> {
        let (path, v) = match runtime.and_then(|r| r.get("bandwidth")) {
            Some(v) if !v.is_null() => ("runtimeConfig.bandwidth", v),
            _ => match conf {
                Some(v) if !v.is_null() => ("bandwidth", v),
                _ => return Ok(None),
            },
        };
        let o = v
            .as_object()
            .ok_or_else(|| bad(path, "expected an object"))?;
        let known = ["ingressRate", "ingressBurst", "egressRate", "egressBurst"];
        if let Some(k) = o.keys().find(|k| !known.contains(&k.as_str())) {
            return Err(bad(
                &format!("{path}.{k}"),
                format!("not supported (known: {})", known.join(", ")),
            ));
        }
        let dir = |rate: &str, burst: &str| -> CniResult<Option<Rate>> {
            let r = num(o, path, rate)?;
            let b = num(o, path, burst)?;
            match (r, b) {
                (Some(bps), burst_bits) => Ok(Some(Rate { bps, burst_bits })),
                (None, Some(_)) => Err(bad(
                    &format!("{path}.{burst}"),
                    format!("given without `{rate}`"),
                )),
                (None, None) => Ok(None),
            }
        };
        let bw = Bandwidth {
            ingress: dir("ingressRate", "ingressBurst")?,
            egress: dir("egressRate", "egressBurst")?,
        };
        Ok((bw.ingress.is_some() || bw.egress.is_some()).then_some(bw))
    }
}

/// The rules that meter the pod's non-policy traffic (see the module
/// text); empty without meters.
/// `fwd` forwards what the pod sends (`normal`, or steering's
/// `resubmit(,50)`).
pub fn flows(cookie: u64, port: &str, mac: &str, m: &Meters, fwd: &str) -> Vec<String> {
    let c = format!("cookie={cookie:#x}");
    let mut v = Vec::new();
    if let Some(i) = m.ingress {
        v.push(format!(
            "{c},table=0,priority=150,dl_dst={mac},actions=meter:{i},normal"
        ));
    }
    if let Some(e) = m.egress {
        v.push(format!(
            "{c},table=0,priority=90,in_port={port},actions=meter:{e},{fwd}"
        ));
    }
    v
}

/// The first meter id ADD tries for an attachment: spread by its cookie
/// over 1..=60000, so parallel ADDs rarely probe the same ids.
pub fn first_id(cookie: u64) -> u32 {
    1 + (cookie % 60_000) as u32
}

/// Meter ids named by `meter:N` in `dump-flows` lines.
pub fn meters_in(lines: &[String]) -> Vec<u32> {
    let mut v: Vec<u32> = lines
        .iter()
        .flat_map(|l| l.split("meter:").skip(1))
        .filter_map(|t| t.split(|c: char| !c.is_ascii_digit()).next()?.parse().ok())
        .collect();
    v.sort_unstable();
    v.dedup();
    v
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn parses_limits_and_names_bad_fields() {
        let rt = json!({"bandwidth":{"ingressRate":10_000_000,"ingressBurst":100_000,"egressRate":5_000_000}});
        let b = Bandwidth::from_conf(None, Some(&rt)).unwrap().unwrap();
        assert_eq!(
            b.ingress.unwrap().meter_spec(7),
            "meter=7,kbps,burst,bands=type=drop,rate=10000,burst_size=100"
        );
        assert_eq!(
            b.egress.unwrap().meter_spec(8),
            "meter=8,kbps,bands=type=drop,rate=5000"
        );
        assert!(Bandwidth::from_conf(Some(&json!({})), None)
            .unwrap()
            .is_none());
        for (bad, field) in [
            (json!({"ingressRate": -1}), "bandwidth.ingressRate"),
            (json!({"egressBurst": 10}), "bandwidth.egressBurst"),
            (json!({"rate": 10}), "bandwidth.rate"),
        ] {
            let e = Bandwidth::from_conf(Some(&bad), None).unwrap_err();
            assert_eq!(e.code, 7);
            assert!(e.msg.contains(&format!("`{field}`")), "{field}: {e}");
        }
    }

    #[test]
    fn flows_and_meter_ids() {
        let m = Meters {
            ingress: Some(3),
            egress: Some(4),
        };
        let f = flows(0xcf01, "br0pf0vf0", "02:00:00:00:00:01", &m, "normal");
        assert_eq!(f.len(), 2);
        assert_eq!(meters_in(&f), [3, 4]);
        assert!(flows(1, "p", "m", &Meters::default(), "normal").is_empty());
        assert!((1..=60_000).contains(&first_id(u64::MAX)));
        assert_eq!(meters_in(&[" actions=meter:12,NORMAL".into()]), [12]);
    }
}
