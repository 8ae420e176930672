//! Reading Courier's Prometheus text exposition: one parser ([`samples`]), sums of
//! counters and gauges ([`metric_sum`]), and histograms with quantiles interpolated
//! the way PromQL's `histogram_quantile` does ([`Histogram`]).

/// `(labels, value)` of each sample of the metric `name` (that name exactly, not
/// `name_other`): the one Prometheus text parser of the tests, drills and bench.
pub fn samples<'a>(text: &'a str, name: &'a str) -> impl Iterator<Item = (&'a str, f64)> + 'a {
    text.lines()
        .filter(|l| !l.starts_with('#'))
        .filter_map(move |l| {
            let rest = l.strip_prefix(name)?;
            let (labels, value) = match rest.as_bytes().first()? {
                b'{' => {
                    // The last brace: a label value may hold braces (a route
                    // template such as `/schemas/ids/{id}`), the value none.
                    let end = rest.rfind('}')?;
                    (&rest[1..end], rest[end + 1..].trim())
                }
                b' ' => ("", rest.trim()),
                _ => return None,
            };
            let value = value.split_whitespace().next()?.parse().ok()?;
            Some((labels, value))
        })
}

/// The sum of all samples of `name` in a Prometheus text page. `name` is a metric
/// name (its series with any labels, but not `name_other`), or a metric name with
/// labels the series must have, e.g. `x_total{result="miss"` (the closing brace is
/// optional): other labels (the exporter's `group` and `main_topic` on every series)
/// and the order of the labels do not matter.
pub fn metric_sum(text: &str, name: &str) -> f64 {
    let (metric, wanted) = match name.split_once('{') {
        Some((m, labels)) => (m, labels_of(labels.trim_end_matches('}'))),
        None => (name, Vec::new()),
    };
    samples(text, metric)
        .filter(|(labels, _)| {
            let have = labels_of(labels);
            wanted.iter().all(|w| have.contains(w))
        })
        .map(|(_, value)| value)
        .sum()
}

/// `a="x",b="y"` as `[("a", "x"), ("b", "y")]` (values without escaped quotes, as
/// Courier's bounded label values are).
fn labels_of(s: &str) -> Vec<(&str, &str)> {
    s.split("\",")
        .filter_map(|pair| {
            let (k, v) = pair.split_once("=\"")?;
            Some((k.trim_start_matches(','), v.trim_end_matches('"')))
        })
        .collect()
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
        for (labels, value) in samples(text, &bucket) {
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

    /// The bucket-by-bucket sum of `hs` (instances, incarnations).
    pub fn merge<'a>(hs: impl IntoIterator<Item = &'a Histogram>) -> Histogram {
        let mut buckets: Vec<(f64, f64)> = Vec::new();
        for h in hs {
            for &(bound, count) in &h.buckets {
                match buckets.iter_mut().find(|(b, _)| *b == bound) {
                    Some((_, c)) => *c += count,
                    None => buckets.push((bound, count)),
                }
            }
        }
        buckets.sort_by(|a, b| a.0.total_cmp(&b.0));
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

/// The exact q-quantile of sorted samples (nearest rank).
pub fn exact_quantile(sorted: &[f64], q: f64) -> Option<f64> {
    if sorted.is_empty() {
        return None;
    }
    let rank = ((q * sorted.len() as f64).ceil() as usize).clamp(1, sorted.len());
    Some(sorted[rank - 1])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sums_the_series_of_a_metric() {
        let text = "# HELP x_total x\n# TYPE x_total counter\n\
x_total{result=\"hit\"} 3\nx_total{result=\"miss\"} 4\nx_total_other 100\nx_total 1\n";
        assert_eq!(metric_sum(text, "x_total"), 8.0);
        assert_eq!(metric_sum(text, "x_total{result=\"miss\""), 4.0);
        assert_eq!(metric_sum(text, "y_total"), 0.0);
    }

    #[test]
    fn label_filters_ignore_other_labels_and_their_order() {
        // The exporter puts its global labels (group, main_topic) first.
        let text = "x_total{group=\"g\",main_topic=\"t\",result=\"hit\"} 3\n\
x_total{group=\"g\",main_topic=\"t\",result=\"miss\"} 4\n\
x_total{group=\"g\",main_topic=\"t\",result=\"miss_other\"} 100\n";
        assert_eq!(metric_sum(text, "x_total"), 107.0);
        assert_eq!(metric_sum(text, "x_total{result=\"miss\""), 4.0);
        assert_eq!(metric_sum(text, "x_total{result=\"miss\"}"), 4.0);
        assert_eq!(
            metric_sum(text, "x_total{main_topic=\"t\",result=\"hit\""),
            3.0
        );
        assert_eq!(metric_sum(text, "x_total{result=\"none\""), 0.0);
    }

    #[test]
    fn a_label_value_may_hold_braces() {
        // Apicurio's request metrics label a route template.
        let text = "rest_requests_seconds_count{method=\"GET\",path=\"/ids/{id}\",status_code_group=\"2xx\"} 2.0\n\
rest_requests_seconds_count{method=\"GET\",path=\"/ids/{id}\",status_code_group=\"4xx\"} 1.0\n";
        assert_eq!(
            metric_sum(
                text,
                "rest_requests_seconds_count{path=\"/ids/{id}\",status_code_group=\"2xx\""
            ),
            2.0
        );
        assert_eq!(metric_sum(text, "rest_requests_seconds_count"), 3.0);
    }

    #[test]
    fn histograms_scrape_merge_and_interpolate() {
        let text = "# TYPE h histogram\n\
h_bucket{le=\"0.1\"} 90\nh_bucket{le=\"1\"} 99\nh_bucket{le=\"+Inf\"} 100\nh_count 100\n\
h_bucket_other{le=\"1\"} 7\n";
        let h = Histogram::scrape(text, "h");
        assert_eq!(
            h.buckets,
            vec![(0.1, 90.0), (1.0, 99.0), (f64::INFINITY, 100.0)]
        );
        let m = Histogram::merge([&h, &h]);
        assert_eq!(m.count(), 200.0);
        let p50 = m.quantile(0.5).unwrap();
        assert!(p50 > 0.0 && p50 <= 0.1, "{p50}");
        assert!((m.quantile(0.99).unwrap() - 1.0).abs() < 1e-9);
        assert_eq!(
            m.quantile(0.999),
            Some(1.0),
            "in +Inf: the highest finite bound"
        );
        assert_eq!(Histogram::default().quantile(0.99), None);
        let from = Histogram::from_samples(&[0.1, 1.0], &[0.05, 0.5, 5.0]);
        assert_eq!(
            from.buckets,
            vec![(0.1, 1.0), (1.0, 2.0), (f64::INFINITY, 3.0)]
        );
        assert_eq!(exact_quantile(&[1.0, 2.0, 3.0, 4.0], 0.5), Some(2.0));
        assert_eq!(exact_quantile(&[], 0.5), None);
    }
}
