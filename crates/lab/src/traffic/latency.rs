//! One-way latency percentiles for the sink: transmit timestamp from the
//! payload header to the sink's receive time, both `CLOCK_MONOTONIC`.
//!
//! Samples go into an HDR histogram (3 significant digits: any reported
//! value is within 0.1% of the true sample at that rank), so recording is
//! O(1) with no allocation at any rate and percentiles need no sorting.

use hdrhistogram::Histogram;

/// Latency percentiles in nanoseconds, as `nicflow sink --json` prints them.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct LatencySummary {
    pub count: u64,
    pub min: u64,
    pub p50: u64,
    pub p99: u64,
    pub p999: u64,
    pub max: u64,
}

/// Recorder of latency samples.
pub struct Latency {
    hist: Histogram<u64>,
    /// Samples whose receive time preceded the transmit time (clocks of
    /// different machines, or a frame not from this host): not recorded.
    pub negative: u64,
}

impl Default for Latency {
    fn default() -> Self {
        Self::new()
    }
}

impl Latency {
    pub fn new() -> Latency {
        // Auto-resizing from 1 ns; 3 significant figures.
        let mut hist = Histogram::new(3).expect("3 significant figures is valid");
        hist.auto(true);
        Latency { hist, negative: 0 }
    }

    /// Record one frame sent at `tx_ns` and received at `rx_ns`.
    #[inline]
    pub fn record(&mut self, tx_ns: u64, rx_ns: u64) {
        match rx_ns.checked_sub(tx_ns) {
            Some(d) => self.record_ns(d),
            None => self.negative += 1,
        }
    }

    /// Record one latency sample.
    #[inline]
    pub fn record_ns(&mut self, ns: u64) {
        // With auto-resize, recording only fails past u64 range limits.
        let _ = self.hist.record(ns);
    }

    pub fn summary(&self) -> LatencySummary {
        if self.hist.is_empty() {
            return LatencySummary::default();
        }
        LatencySummary {
            count: self.hist.len(),
            min: self.hist.min(),
            p50: self.hist.value_at_quantile(0.50),
            p99: self.hist.value_at_quantile(0.99),
            p999: self.hist.value_at_quantile(0.999),
            max: self.hist.max(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn within(v: u64, want: u64) -> bool {
        let tol = (want as f64 * 0.001).ceil() as u64;
        v.abs_diff(want) <= tol
    }

    #[test]
    fn percentiles_of_known_samples() {
        // 1..=100_000 µs once each: the p-quantile is p * 100_000 µs.
        let mut l = Latency::new();
        for us in 1..=100_000u64 {
            l.record(1_000_000, 1_000_000 + us * 1000);
        }
        let s = l.summary();
        assert_eq!(s.count, 100_000);
        assert!(within(s.min, 1_000), "{s:?}");
        assert!(within(s.p50, 50_000_000), "{s:?}");
        assert!(within(s.p99, 99_000_000), "{s:?}");
        assert!(within(s.p999, 99_900_000), "{s:?}");
        assert!(within(s.max, 100_000_000), "{s:?}");
    }

    #[test]
    fn skewed_samples_and_tail() {
        // 998 samples at 10 µs, 1 at 5 ms, 1 at 50 ms: p50 = p99 = 10 µs,
        // p99.9 falls on the 999th sample (5 ms), max is 50 ms.
        let mut l = Latency::new();
        for _ in 0..998 {
            l.record_ns(10_000);
        }
        l.record_ns(5_000_000);
        l.record_ns(50_000_000);
        let s = l.summary();
        assert_eq!(s.count, 1000);
        assert!(within(s.p50, 10_000) && within(s.p99, 10_000), "{s:?}");
        assert!(within(s.p999, 5_000_000), "{s:?}");
        assert!(within(s.max, 50_000_000), "{s:?}");
    }

    #[test]
    fn empty_and_negative() {
        let mut l = Latency::new();
        assert_eq!(l.summary(), LatencySummary::default());
        l.record(10, 5);
        assert_eq!(l.negative, 1);
        assert_eq!(l.summary().count, 0);
    }
}
