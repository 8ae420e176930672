//! Scraping an instance's `/metrics` and merging the end-to-end latency histograms
//! (`courier_event_age_seconds`: Kafka timestamp → the API's acceptance) of all
//! instances and incarnations.

use std::time::Duration;

/// What the drill reads from one scrape.
#[derive(Debug, Clone, Default)]
pub struct Scrape {
    /// Cumulative `(le, count)` buckets of `courier_event_age_seconds`.
    pub age_buckets: Vec<(f64, f64)>,
    pub api_unavailable: f64,
    pub assigned: f64,
    pub delivered: f64,
}

/// Deadline of one scrape: a stuck instance must not stall the monitor.
pub const SCRAPE_TIMEOUT: Duration = Duration::from_secs(2);

/// Scrapes the instance whose metrics listener is on `port`; `None` when it does
/// not answer (yet, or any more).
pub async fn scrape(port: u16) -> Option<Scrape> {
    let text = courier::testkit::metrics_page(port, Some(SCRAPE_TIMEOUT))
        .await
        .ok()?;
    Some(parse(&text))
}

fn value(line: &str) -> Option<f64> {
    line.rsplit(' ').next()?.parse().ok()
}

fn series_of<'a>(line: &'a str, name: &str) -> Option<&'a str> {
    let rest = line.strip_prefix(name)?;
    matches!(rest.as_bytes().first(), Some(b' ') | Some(b'{')).then_some(rest)
}

pub fn parse(text: &str) -> Scrape {
    let mut s = Scrape::default();
    for line in text.lines().filter(|l| !l.starts_with('#')) {
        if let Some(rest) = series_of(line, "courier_event_age_seconds_bucket") {
            let le = rest
                .split("le=\"")
                .nth(1)
                .and_then(|r| r.split('"').next())
                .and_then(|v| {
                    if v == "+Inf" {
                        Some(f64::INFINITY)
                    } else {
                        v.parse().ok()
                    }
                });
            if let (Some(le), Some(v)) = (le, value(line)) {
                match s.age_buckets.iter_mut().find(|(b, _)| *b == le) {
                    Some(b) => b.1 += v,
                    None => s.age_buckets.push((le, v)),
                }
            }
        } else if series_of(line, "courier_api_unavailable").is_some() {
            s.api_unavailable += value(line).unwrap_or(0.0);
        } else if series_of(line, "courier_assigned_partitions").is_some() {
            s.assigned += value(line).unwrap_or(0.0);
        } else if series_of(line, "courier_delivered_total").is_some() {
            s.delivered += value(line).unwrap_or(0.0);
        }
    }
    s.age_buckets.sort_by(|a, b| a.0.total_cmp(&b.0));
    s
}

/// Sums cumulative histograms bucket by bucket.
pub fn merge<'a>(scrapes: impl IntoIterator<Item = &'a Scrape>) -> Vec<(f64, f64)> {
    let mut out: Vec<(f64, f64)> = Vec::new();
    for s in scrapes {
        for &(le, v) in &s.age_buckets {
            match out.iter_mut().find(|(b, _)| *b == le) {
                Some(b) => b.1 += v,
                None => out.push((le, v)),
            }
        }
    }
    out.sort_by(|a, b| a.0.total_cmp(&b.0));
    out
}

/// The `q` quantile of a cumulative histogram, interpolated within the bucket as
/// Prometheus' `histogram_quantile` does. `None` when it is empty.
pub fn quantile(buckets: &[(f64, f64)], q: f64) -> Option<f64> {
    let total = buckets.last()?.1;
    if total <= 0.0 {
        return None;
    }
    let rank = q * total;
    let mut prev = (0.0, 0.0);
    for &(le, c) in buckets {
        if c >= rank {
            if le.is_infinite() {
                return Some(prev.0);
            }
            let width = c - prev.1;
            let frac = if width > 0.0 {
                (rank - prev.1) / width
            } else {
                1.0
            };
            return Some(prev.0 + (le - prev.0) * frac);
        }
        prev = (le, c);
    }
    Some(prev.0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_and_merges_histograms() {
        let text = "# TYPE courier_event_age_seconds histogram
courier_event_age_seconds_bucket{le=\"0.1\"} 90
courier_event_age_seconds_bucket{le=\"1\"} 99
courier_event_age_seconds_bucket{le=\"+Inf\"} 100
courier_event_age_seconds_count 100
courier_api_unavailable 1
courier_assigned_partitions{topic=\"t\"} 2
courier_assigned_partitions_other 7
";
        let s = parse(text);
        assert_eq!(s.api_unavailable, 1.0);
        assert_eq!(s.assigned, 2.0);
        let m = merge([&s, &s]);
        assert_eq!(m.last().unwrap().1, 200.0);
        let p50 = quantile(&m, 0.5).unwrap();
        assert!(p50 > 0.0 && p50 <= 0.1, "{p50}");
        let p99 = quantile(&m, 0.99).unwrap();
        assert!((p99 - 1.0).abs() < 1e-9, "{p99}");
        assert_eq!(quantile(&[], 0.99), None);
    }
}
