//! Scraping an instance's `/metrics` and merging the end-to-end latency histograms
//! (`courier_event_age_seconds`: Kafka timestamp → the API's acceptance) of all
//! instances and incarnations.

use courier_testkit::prom::{metric_sum, samples, Histogram};
use std::collections::BTreeMap;
use std::time::Duration;

/// What the drill reads from one scrape.
#[derive(Debug, Clone, Default)]
pub struct Scrape {
    /// `courier_event_age_seconds`, summed over label sets.
    pub age: Histogram,
    /// `courier_api_unavailable`, summed over destinations: ≥ 1 while any
    /// destination is unavailable.
    pub api_unavailable: f64,
    /// `courier_api_unavailable` by its `destination` label.
    pub unavailable_by_destination: BTreeMap<String, f64>,
    /// `courier_destination_diverted_total` by its `destination` label (summed
    /// over reasons).
    pub diverted_by_destination: BTreeMap<String, f64>,
    pub assigned: f64,
    /// `courier_delivered_total`.
    pub delivered: f64,
    /// `courier_events_deleted_unread_total`, summed over topics and partitions.
    pub deleted_unread: f64,
    /// `courier_breaker_transitions_total`, summed over its labels.
    pub breaker_transitions: f64,
    /// `courier_batch_results_unreadable_total`, summed over reasons.
    pub batch_results_unreadable: f64,
}

/// Courier's count of events the log lost before the group read them (issue 23).
pub const DELETED_UNREAD: &str = "courier_events_deleted_unread_total";

/// Deadline of one scrape: a stuck instance must not stall the monitor.
pub const SCRAPE_TIMEOUT: Duration = Duration::from_secs(2);

/// Scrapes the instance whose metrics listener is on `port`; `None` when it does
/// not answer (yet, or any more).
pub async fn scrape(port: u16) -> Option<Scrape> {
    let text = courier_testkit::metrics_page(port, Some(SCRAPE_TIMEOUT))
        .await
        .ok()?;
    Some(parse(&text))
}

pub fn parse(text: &str) -> Scrape {
    Scrape {
        age: Histogram::scrape(text, "courier_event_age_seconds"),
        api_unavailable: metric_sum(text, "courier_api_unavailable"),
        unavailable_by_destination: by_destination(text, "courier_api_unavailable"),
        diverted_by_destination: by_destination(text, "courier_destination_diverted_total"),
        assigned: metric_sum(text, "courier_assigned_partitions"),
        delivered: metric_sum(text, "courier_delivered_total"),
        deleted_unread: metric_sum(text, DELETED_UNREAD),
        breaker_transitions: metric_sum(text, "courier_breaker_transitions_total"),
        batch_results_unreadable: metric_sum(text, "courier_batch_results_unreadable_total"),
    }
}

/// The samples of `name` summed by their `destination` label (a series
/// without one under "").
fn by_destination(text: &str, name: &str) -> BTreeMap<String, f64> {
    let mut out = BTreeMap::new();
    for (labels, value) in samples(text, name) {
        let dest = labels
            .split_once("destination=\"")
            .and_then(|(_, rest)| rest.split_once('"'))
            .map_or("", |(d, _)| d);
        *out.entry(dest.to_string()).or_insert(0.0) += value;
    }
    out
}

/// Sums the instances' histograms bucket by bucket.
pub fn merge<'a>(scrapes: impl IntoIterator<Item = &'a Scrape>) -> Histogram {
    Histogram::merge(scrapes.into_iter().map(|s| &s.age))
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
courier_api_unavailable{destination=\"http://127.0.0.1:1\",group=\"g\"} 0
courier_api_unavailable{group=\"g\",destination=\"second\"} 1
courier_destination_diverted_total{destination=\"second\",reason=\"destination_unavailable\"} 7
courier_destination_diverted_total{destination=\"second\",reason=\"key_in_dlq\"} 3
courier_assigned_partitions{topic=\"t\"} 2
courier_assigned_partitions_other 7
";
        let s = parse(text);
        assert_eq!(s.api_unavailable, 1.0);
        assert_eq!(s.unavailable_by_destination["second"], 1.0);
        assert_eq!(s.unavailable_by_destination["http://127.0.0.1:1"], 0.0);
        assert_eq!(s.diverted_by_destination["second"], 10.0);
        assert_eq!(s.assigned, 2.0);
        let m = merge([&s, &s]);
        assert_eq!(m.count(), 200.0);
        let p50 = m.quantile(0.5).unwrap();
        assert!(p50 > 0.0 && p50 <= 0.1, "{p50}");
        let p99 = m.quantile(0.99).unwrap();
        assert!((p99 - 1.0).abs() < 1e-9, "{p99}");
    }
}
