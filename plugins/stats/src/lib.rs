//! Example plugin `stats`: summary statistics, percentiles and histograms.

// wit-bindgen's generated modules carry no docs.
#![allow(missing_docs)]

codemode_sdk::generate!({ world: "plugin", path: "wit" });

use exports::example::stats::stats::{self, Bucket, HistogramResult, PercentileResult, Statistics};

/// Default number of histogram buckets.
const DEFAULT_BINS: u32 = 10;
/// Most histogram buckets one call may ask for.
const MAX_BINS: u32 = 1000;

struct Stats;

#[codemode_sdk::capabilities]
impl stats::Guest for Stats {
    /// Summarize a list of numbers: count, mean, median, stdev, min, max.
    ///
    /// Returns count, mean, median, population standard deviation, min and max of the
    /// values. Fails on an empty list.
    #[capability(search_terms = ["average", "descriptive statistics", "standard deviation"])]
    fn summary(values: Vec<f64>) -> Result<Statistics, String> {
        let sorted = sorted(values)?;
        let n = sorted.len() as f64;
        let mean = sorted.iter().sum::<f64>() / n;
        let variance = sorted.iter().map(|v| (v - mean).powi(2)).sum::<f64>() / n;
        Ok(Statistics {
            count: sorted.len() as u32,
            mean,
            median: quantile(&sorted, 0.5),
            stdev: variance.sqrt(),
            min: sorted[0],
            max: sorted[sorted.len() - 1],
        })
    }

    /// Compute the p-th percentile (0-100) of a list of numbers.
    ///
    /// Linear interpolation between the two nearest ranks (numpy's default): p=50 is the
    /// median, p=90 the value 90% of the data lies below.
    #[capability(search_terms = ["quantile", "p90", "median"])]
    fn percentile(values: Vec<f64>, p: f64) -> Result<PercentileResult, String> {
        if !(0.0..=100.0).contains(&p) {
            return Err(format!("p must be between 0 and 100, got {p}"));
        }
        let sorted = sorted(values)?;
        Ok(PercentileResult {
            value: quantile(&sorted, p / 100.0),
        })
    }

    /// Count numbers into equal-width buckets.
    ///
    /// Splits [min, max] of the values into `bins` equal-width buckets (default 10, at most
    /// 1000) and counts the values in each; the last bucket includes the maximum.
    #[capability(search_terms = ["distribution", "bins", "frequency"])]
    fn histogram(values: Vec<f64>, bins: Option<u32>) -> Result<HistogramResult, String> {
        let bins = bins.unwrap_or(DEFAULT_BINS);
        if bins == 0 || bins > MAX_BINS {
            return Err(format!("bins must be between 1 and {MAX_BINS}, got {bins}"));
        }
        let sorted = sorted(values)?;
        let (low, high) = (sorted[0], sorted[sorted.len() - 1]);
        let width = (high - low) / f64::from(bins);
        let mut counts = vec![0u32; bins as usize];
        for v in &sorted {
            // The maximum belongs to the last bucket (buckets are [low, high), the last
            // one closed).
            let index = if width == 0.0 {
                0
            } else {
                (((v - low) / width) as usize).min(bins as usize - 1)
            };
            counts[index] += 1;
        }
        let buckets = counts
            .into_iter()
            .enumerate()
            .map(|(i, count)| Bucket {
                low: low + width * i as f64,
                high: if i + 1 == bins as usize {
                    high
                } else {
                    low + width * (i + 1) as f64
                },
                count,
            })
            .collect();
        Ok(HistogramResult { buckets })
    }
}

/// Sorts `values`, rejecting an empty list and non-finite numbers.
fn sorted(mut values: Vec<f64>) -> Result<Vec<f64>, String> {
    if values.is_empty() {
        return Err("values must not be empty".to_owned());
    }
    if let Some(bad) = values.iter().position(|v| !v.is_finite()) {
        return Err(format!("values[{bad}] is not a finite number"));
    }
    values.sort_by(f64::total_cmp);
    Ok(values)
}

/// The `q`-quantile (0..=1) of sorted values, interpolating linearly between the two
/// nearest ranks (the common "linear" method, as numpy's default).
fn quantile(sorted: &[f64], q: f64) -> f64 {
    let rank = q * (sorted.len() - 1) as f64;
    let below = rank.floor() as usize;
    let above = rank.ceil() as usize;
    sorted[below] + (sorted[above] - sorted[below]) * (rank - below as f64)
}

export!(Stats);

// Pure functions of their arguments: a policy that asks before writes lets them
// run.
codemode_sdk::annotations![
    codemode_sdk::Annotated::new("stats.summary")
        .read_only(true)
        .idempotent(true)
        .open_world(false),
    codemode_sdk::Annotated::new("stats.percentile")
        .read_only(true)
        .idempotent(true)
        .open_world(false),
    codemode_sdk::Annotated::new("stats.histogram")
        .read_only(true)
        .idempotent(true)
        .open_world(false),
];

#[cfg(test)]
mod tests {
    use super::*;
    use stats::Guest;

    #[test]
    fn summary_of_known_values() {
        let s = Stats::summary(vec![2.0, 4.0, 4.0, 4.0, 5.0, 5.0, 7.0, 9.0]).unwrap();
        assert_eq!(
            (s.count, s.mean, s.median, s.stdev, s.min, s.max),
            (8, 5.0, 4.5, 2.0, 2.0, 9.0)
        );
    }

    #[test]
    fn percentile_interpolates() {
        let v = vec![1.0, 2.0, 3.0, 4.0];
        assert_eq!(Stats::percentile(v.clone(), 50.0).map(|p| p.value), Ok(2.5));
        assert_eq!(Stats::percentile(v.clone(), 0.0).map(|p| p.value), Ok(1.0));
        assert_eq!(
            Stats::percentile(v, 101.0).map(|p| p.value),
            Err("p must be between 0 and 100, got 101".to_string())
        );
    }

    #[test]
    fn histogram_puts_max_in_last_bucket() {
        let h = Stats::histogram(vec![0.0, 1.0, 2.0, 3.0, 4.0], Some(2)).unwrap();
        let counts: Vec<u32> = h.buckets.iter().map(|b| b.count).collect();
        assert_eq!(counts, vec![2, 3]);
        assert_eq!((h.buckets[1].low, h.buckets[1].high), (2.0, 4.0));
    }
}
