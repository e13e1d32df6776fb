//! Meters in the userspace datapath: where a `meter` datapath action (a
//! rule's `meter:N`) meets the bridge's token buckets.
//!
//! A port of Open vSwitch's `dp_netdev_run_meter` (lib/dpif-netdev.c), per
//! packet: every band is a token bucket filled at its rate since the
//! meter's last use, capped at its burst (the rate itself when no burst is
//! given: one second's worth, as OVS); a packet takes its volume (bits for
//! kbit/s meters, one packet for packet/s meters) from every band; of the
//! bands that could not give it, the one with the highest rate fires —
//! `drop` drops the packet, `dscp_remark` raises its drop precedence. OVS
//! counts in milliseconds; this counts in microseconds so low rates with
//! small bursts keep their accuracy between closely spaced packets.
//!
//! Meters are shared by every userspace flow that names them. The kernel
//! engines run the same buckets in their `dp_meters` map (bpf/dp_exec.h),
//! one entry per engine, written when the first flow naming the meter is
//! offloaded there: a frame is metered where its flow runs, and a meter's
//! counters are the sum of both places ([`MeterCounters`]).

use nicflow_ofctl::meter::{BandType, MeterSpec};
use std::collections::HashMap;
use std::time::Instant;

/// What a meter decided for one packet.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Verdict {
    Pass,
    Drop,
    /// Raise the AF drop precedence by this much.
    Remark(u8),
}

#[derive(Clone, Debug, Default)]
pub struct BandState {
    /// Tokens: millibits (kbit/s meters) or micro-packets (packet/s).
    bucket: u64,
    max: u64,
    /// Tokens added per microsecond (kbit/s -> millibits/µs and
    /// packets/s -> micro-packets/µs are both the plain rate).
    rate: u64,
    pub packets: u64,
    pub bytes: u64,
}

#[derive(Clone, Debug)]
pub struct DpMeter {
    pub spec: MeterSpec,
    pub bands: Vec<BandState>,
    last: Instant,
    pub created: Instant,
    pub packets_in: u64,
    pub bytes_in: u64,
}

impl DpMeter {
    pub fn new(spec: MeterSpec, now: Instant) -> DpMeter {
        let bands = spec
            .bands
            .iter()
            .map(|b| {
                let burst = if b.burst_size == 0 {
                    b.rate
                } else {
                    b.burst_size
                };
                let max = u64::from(burst) * 1_000_000;
                BandState {
                    // Start with a full bucket, as OVS.
                    bucket: max,
                    max,
                    rate: u64::from(b.rate),
                    packets: 0,
                    bytes: 0,
                }
            })
            .collect();
        DpMeter {
            spec,
            bands,
            last: now,
            created: now,
            packets_in: 0,
            bytes_in: 0,
        }
    }

    /// Take a new configuration, keeping counters, buckets and start time
    /// (`mod-meter` on a meter in use).
    pub fn reconfigure(&mut self, spec: MeterSpec, now: Instant) {
        let mut fresh = DpMeter::new(spec, now);
        fresh.created = self.created;
        fresh.packets_in = self.packets_in;
        fresh.bytes_in = self.bytes_in;
        *self = fresh;
    }

    /// Meter one packet of `len` bytes at `now`.
    pub fn run(&mut self, now: Instant, len: usize) -> Verdict {
        let dt = now.saturating_duration_since(self.last).as_micros();
        if dt > 0 {
            self.last = now;
            for b in &mut self.bands {
                let add = (dt.min(u128::from(u64::MAX)) as u64).saturating_mul(b.rate);
                b.bucket = b.bucket.saturating_add(add).min(b.max);
            }
        }
        self.packets_in += 1;
        self.bytes_in += len as u64;
        let volume = if self.spec.pktps() {
            1_000_000
        } else {
            len as u64 * 8 * 1000
        };
        let mut fired: Option<usize> = None;
        for (i, b) in self.bands.iter_mut().enumerate() {
            if b.bucket >= volume {
                b.bucket -= volume;
            } else if fired.is_none_or(|f| b.rate > self.spec.bands[f].rate.into()) {
                fired = Some(i);
            }
        }
        let Some(i) = fired else {
            return Verdict::Pass;
        };
        let b = &mut self.bands[i];
        b.packets += 1;
        b.bytes += len as u64;
        match self.spec.bands[i].kind {
            BandType::Drop => Verdict::Drop,
            BandType::DscpRemark { prec_level } => Verdict::Remark(prec_level),
        }
    }
}

/// A meter's counters kept outside this table (the kernel engines').
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct MeterCounters {
    pub packets_in: u64,
    pub bytes_in: u64,
    /// (packets, bytes) per band, in band order.
    pub bands: Vec<(u64, u64)>,
}

/// The bridge's meters by id.
#[derive(Default)]
pub struct Meters {
    map: HashMap<u32, DpMeter>,
}

impl Meters {
    pub fn get(&self, id: u32) -> Option<&DpMeter> {
        self.map.get(&id)
    }

    pub fn get_mut(&mut self, id: u32) -> Option<&mut DpMeter> {
        self.map.get_mut(&id)
    }

    /// Add or reconfigure a meter.
    pub fn set(&mut self, spec: MeterSpec, now: Instant) {
        match self.map.get_mut(&spec.meter_id) {
            Some(m) => m.reconfigure(spec, now),
            None => {
                self.map.insert(spec.meter_id, DpMeter::new(spec, now));
            }
        }
    }

    pub fn remove(&mut self, id: u32) -> Option<DpMeter> {
        self.map.remove(&id)
    }

    pub fn contains(&self, id: u32) -> bool {
        self.map.contains_key(&id)
    }

    /// Meters in id order.
    pub fn iter(&self) -> impl Iterator<Item = &DpMeter> {
        let mut v: Vec<&DpMeter> = self.map.values().collect();
        v.sort_by_key(|m| m.spec.meter_id);
        v.into_iter()
    }

    pub fn len(&self) -> usize {
        self.map.len()
    }

    pub fn is_empty(&self) -> bool {
        self.map.is_empty()
    }
}

/// The DSCP after raising an AF class's drop precedence (RFC 2597: AFxy is
/// DSCP 8x+2y, x 1-4, y 1-3) by `prec_level`, at most AFx3; other code
/// points are left alone.
pub fn remark_dscp(dscp: u8, prec_level: u8) -> u8 {
    let (x, y) = (dscp >> 3, (dscp >> 1) & 3);
    if (1..=4).contains(&x) && (1..=3).contains(&y) && dscp & 1 == 0 {
        let y = y.saturating_add(prec_level).min(3);
        (x << 3) | (y << 1)
    } else {
        dscp
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use nicflow_ofctl::meter::parse_meter;
    use std::time::Duration;

    fn meter(text: &str, t0: Instant) -> DpMeter {
        DpMeter::new(parse_meter(text).unwrap(), t0)
    }

    /// A steady stream offered at twice the rate passes the rate (plus the
    /// initial burst), within a packet.
    #[test]
    fn kbps_meter_passes_its_rate() {
        let t0 = Instant::now();
        // 1,000 kbit/s, 10 kbit burst; 1,250-byte (10 kbit) packets every
        // 5 ms = 2,000 kbit/s offered, for 10 s.
        let mut m = meter(
            "meter=1,kbps,burst,bands=type=drop,rate=1000,burst_size=10",
            t0,
        );
        let mut passed = 0u64;
        for i in 0..2000u64 {
            if m.run(t0 + Duration::from_millis(5 * i), 1250) == Verdict::Pass {
                passed += 1;
            }
        }
        // 10 s at 1,000 kbit/s = 1,000 packets of 10 kbit, +1 for the burst.
        assert!((999..=1002).contains(&passed), "{passed}");
        assert_eq!(m.bands[0].packets, 2000 - passed);
        assert_eq!(m.packets_in, 2000);
    }

    #[test]
    fn pktps_meter_and_default_burst() {
        let t0 = Instant::now();
        // 100 packets/s, no burst flag: the burst is one second (100).
        let mut m = meter("meter=2,pktps,bands=type=drop,rate=100", t0);
        let burst = (0..1000).filter(|_| m.run(t0, 64) == Verdict::Pass).count();
        assert_eq!(burst, 100);
        // Then 1,000 packets/s offered for 2 s: 200 pass.
        let later = (1..=2000u64)
            .filter(|i| m.run(t0 + Duration::from_millis(*i), 64) == Verdict::Pass)
            .count();
        assert!((199..=201).contains(&later), "{later}");
    }

    #[test]
    fn the_highest_rate_band_exceeded_fires() {
        let t0 = Instant::now();
        let mut m = meter(
            "meter=3,pktps,burst,bands=type=dscp_remark,rate=10,burst_size=1,prec_level=1,type=drop,rate=20,burst_size=2",
            t0,
        );
        // Empty both buckets: the first packet passes both, the second
        // exceeds the remark band only, the third both (drop has the higher rate).
        assert_eq!(m.run(t0, 64), Verdict::Pass);
        assert_eq!(m.run(t0, 64), Verdict::Remark(1));
        assert_eq!(m.run(t0, 64), Verdict::Drop);
        assert_eq!((m.bands[0].packets, m.bands[1].packets), (1, 1));
    }

    #[test]
    fn dscp_remark_raises_af_drop_precedence_only() {
        assert_eq!(remark_dscp(10, 1), 12); // AF11 -> AF12
        assert_eq!(remark_dscp(12, 2), 14); // AF12 -> AF13 (capped)
        assert_eq!(remark_dscp(34, 1), 36); // AF41 -> AF42
        assert_eq!(remark_dscp(46, 1), 46); // EF untouched
        assert_eq!(remark_dscp(0, 1), 0); // best effort untouched
    }
}
