//! Reading Courier's histograms from its Prometheus text exposition, and quantiles
//! interpolated the way PromQL's `histogram_quantile` does (counters and gauges:
//! `courier::testkit::metric_sum`).

/// `(labels, value)` of each sample of the metric `name`.
fn series<'a>(text: &'a str, name: &'a str) -> impl Iterator<Item = (&'a str, f64)> + 'a {
    text.lines()
        .filter(|l| !l.starts_with('#'))
        .filter_map(move |l| {
            let rest = l.strip_prefix(name)?;
            let (labels, value) = match rest.as_bytes().first()? {
                b'{' => {
                    let end = rest.find('}')?;
                    (&rest[1..end], rest[end + 1..].trim())
                }
                b' ' => ("", rest.trim()),
                _ => return None,
            };
            let value = value.split_whitespace().next()?.parse().ok()?;
            Some((labels, value))
        })
}

/// A cumulative histogram: `(upper bound, count ≤ bound)`, ascending, ending with +Inf.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Histogram {
    pub buckets: Vec<(f64, f64)>,
}

impl Histogram {
    /// The `<name>_bucket` series of `text`, summed over all label sets per bound.
    pub fn scrape(text: &str, name: &str) -> Histogram {
        let bucket = format!("{name}_bucket");
        let mut buckets: Vec<(f64, f64)> = Vec::new();
        for (labels, value) in series(text, &bucket) {
            let Some(le) = labels
                .split(',')
                .find_map(|kv| kv.trim().strip_prefix("le="))
            else {
                continue;
            };
            let le = le.trim_matches('"');
            let bound = if le == "+Inf" {
                f64::INFINITY
            } else {
                match le.parse::<f64>() {
                    Ok(b) => b,
                    Err(_) => continue,
                }
            };
            match buckets.iter_mut().find(|(b, _)| *b == bound) {
                Some((_, c)) => *c += value,
                None => buckets.push((bound, value)),
            }
        }
        buckets.sort_by(|a, b| a.0.total_cmp(&b.0));
        Histogram { buckets }
    }

    /// Buckets `samples` (seconds) on `bounds`, as Courier's exporter would.
    pub fn from_samples(bounds: &[f64], samples: &[f64]) -> Histogram {
        let mut buckets: Vec<(f64, f64)> = bounds
            .iter()
            .copied()
            .chain([f64::INFINITY])
            .map(|b| (b, 0.0))
            .collect();
        for s in samples {
            for (b, c) in buckets.iter_mut() {
                if *s <= *b {
                    *c += 1.0;
                }
            }
        }
        Histogram { buckets }
    }

    pub fn count(&self) -> f64 {
        self.buckets.last().map(|b| b.1).unwrap_or(0.0)
    }

    /// The q-quantile, linearly interpolated inside its bucket (lower bound of the
    /// first bucket: 0); in the +Inf bucket, the highest finite bound.
    pub fn quantile(&self, q: f64) -> Option<f64> {
        let total = self.count();
        if total <= 0.0 {
            return None;
        }
        let rank = q * total;
        let (mut lower, mut below) = (0.0, 0.0);
        for &(bound, cum) in &self.buckets {
            if cum >= rank {
                if bound.is_infinite() {
                    return Some(lower);
                }
                let width = cum - below;
                let frac = if width > 0.0 {
                    (rank - below) / width
                } else {
                    1.0
                };
                return Some(lower + (bound - lower) * frac);
            }
            lower = bound;
            below = cum;
        }
        Some(lower)
    }
}

/// The bounds Courier uses for `courier_delivery_latency_seconds` (src/metrics.rs),
/// to bucket the bare client's exact latencies the same way.
pub const COURIER_LATENCY_BOUNDS: &[f64] = courier::metrics::LATENCY_BUCKETS;

/// The exact q-quantile of sorted samples (nearest rank).
pub fn exact_quantile(sorted: &[f64], q: f64) -> Option<f64> {
    if sorted.is_empty() {
        return None;
    }
    let rank = ((q * sorted.len() as f64).ceil() as usize).clamp(1, sorted.len());
    Some(sorted[rank - 1])
}
