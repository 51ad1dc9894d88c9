//! A fixed-size latency histogram in microseconds with about 1.5% relative precision, so a worker
//! records a request with one increment and no allocation however long the run.

use std::time::Duration;

const EXACT_BELOW: u64 = 128;
const SUB_BUCKETS_BITS: u32 = 6;
const SUB_BUCKETS: u64 = 1 << SUB_BUCKETS_BITS;
// Values up to 2^40 µs (about 12 days) have their own bucket; larger ones share the last.
const HIGHEST_BIT: u32 = 40;
const BUCKETS: usize = (EXACT_BELOW + (HIGHEST_BIT as u64 - 6) * SUB_BUCKETS) as usize;

/// Counts of latencies, with the exact fastest, slowest and sum.
#[derive(Clone, Debug)]
pub struct Histogram {
    counts: Vec<u64>,
    total: u64,
    sum_micros: u128,
    min_micros: u64,
    max_micros: u64,
}

impl Default for Histogram {
    fn default() -> Self {
        Histogram {
            counts: vec![0; BUCKETS],
            total: 0,
            sum_micros: 0,
            min_micros: u64::MAX,
            max_micros: 0,
        }
    }
}

fn bucket_of(micros: u64) -> usize {
    if micros < EXACT_BELOW {
        return micros as usize;
    }
    let highest_bit = (63 - micros.leading_zeros()).min(HIGHEST_BIT - 1);
    let micros = micros.min((1 << HIGHEST_BIT) - 1);
    let shift = highest_bit - SUB_BUCKETS_BITS;
    let sub_bucket = (micros >> shift) & (SUB_BUCKETS - 1);
    (EXACT_BELOW + u64::from(highest_bit - 7) * SUB_BUCKETS + sub_bucket) as usize
}

fn lowest_value_of(bucket: usize) -> u64 {
    let bucket = bucket as u64;
    if bucket < EXACT_BELOW {
        return bucket;
    }
    let offset = bucket - EXACT_BELOW;
    let highest_bit = offset / SUB_BUCKETS + 7;
    (SUB_BUCKETS + offset % SUB_BUCKETS) << (highest_bit - u64::from(SUB_BUCKETS_BITS))
}

impl Histogram {
    /// Records one latency.
    pub fn record(&mut self, latency: Duration) {
        let micros = u64::try_from(latency.as_micros()).unwrap_or(u64::MAX);
        self.counts[bucket_of(micros)] += 1;
        self.total += 1;
        self.sum_micros += u128::from(micros);
        self.min_micros = self.min_micros.min(micros);
        self.max_micros = self.max_micros.max(micros);
    }

    /// Adds every latency of `other` to this histogram.
    pub fn merge(&mut self, other: &Histogram) {
        for (mine, theirs) in self.counts.iter_mut().zip(&other.counts) {
            *mine += theirs;
        }
        self.total += other.total;
        self.sum_micros += other.sum_micros;
        self.min_micros = self.min_micros.min(other.min_micros);
        self.max_micros = self.max_micros.max(other.max_micros);
    }

    /// How many latencies were recorded.
    pub fn count(&self) -> u64 {
        self.total
    }

    /// The fastest latency, or zero when none was recorded.
    pub fn fastest(&self) -> Duration {
        if self.total == 0 {
            Duration::ZERO
        } else {
            Duration::from_micros(self.min_micros)
        }
    }

    /// The slowest latency.
    pub fn slowest(&self) -> Duration {
        Duration::from_micros(self.max_micros)
    }

    /// The mean latency.
    pub fn average(&self) -> Duration {
        if self.total == 0 {
            return Duration::ZERO;
        }
        Duration::from_micros((self.sum_micros / u128::from(self.total)) as u64)
    }

    /// The latency below which `percent` percent of the requests finished (within the bucket
    /// precision, and never outside the fastest..slowest range).
    pub fn percentile(&self, percent: f64) -> Duration {
        if self.total == 0 {
            return Duration::ZERO;
        }
        let rank = ((percent / 100.0) * self.total as f64).ceil().max(1.0) as u64;
        let mut seen = 0;
        for (bucket, count) in self.counts.iter().enumerate() {
            seen += count;
            if seen >= rank {
                let value = lowest_value_of(bucket).clamp(self.min_micros, self.max_micros);
                return Duration::from_micros(value);
            }
        }
        self.slowest()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buckets_are_ordered_and_precise() {
        let mut previous = 0;
        for micros in [
            0u64,
            1,
            127,
            128,
            129,
            255,
            256,
            1000,
            65_535,
            1_000_000,
            1 << 39,
        ] {
            let bucket = bucket_of(micros);
            assert!(bucket >= previous);
            previous = bucket;
            let low = lowest_value_of(bucket);
            assert!(
                low <= micros && micros - low <= micros / 64 + 1,
                "{micros} -> {low}"
            );
        }
        assert!(bucket_of(u64::MAX) < BUCKETS);
    }

    #[test]
    fn percentiles_of_a_uniform_spread() {
        let mut histogram = Histogram::default();
        for millis in 1..=100 {
            histogram.record(Duration::from_millis(millis));
        }
        assert_eq!(histogram.count(), 100);
        assert_eq!(histogram.fastest(), Duration::from_millis(1));
        assert_eq!(histogram.slowest(), Duration::from_millis(100));
        let p50 = histogram.percentile(50.0).as_secs_f64();
        let p99 = histogram.percentile(99.0).as_secs_f64();
        assert!((0.049..=0.050).contains(&p50), "{p50}");
        assert!((0.097..=0.099).contains(&p99), "{p99}");
    }
}
