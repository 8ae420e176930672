//! The batch endpoint's faults ([`BatchFaults`]): answers a real API, or
//! what stands in front of it, gives to a batch and that say less than they
//! seem to — a 200 with an HTML page from a proxy, a connection dropped in the
//! middle of the results, a whole batch refused with a status at random, an
//! event listed twice with two different results, only half of the batch
//! accepted and listed, a mix of per-item statuses. Each is booked as what
//! the API behind it did: an item the answer does not prove stored is booked
//! as failed, so the audit counts it lost unless Courier sends it again.

use axum::body::{Body, Bytes};
use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};
use serde::{Deserialize, Serialize};

/// What the batch endpoint does wrong, and how often (each rate in `0..=1`,
/// drawn per request in this order: `html_rate`, `cut_rate`,
/// `whole_fail_rate`; then per item). Defaults: none.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(default)]
pub struct BatchFaults {
    /// A batch request answered `200 OK` with an HTML page (a proxy's error
    /// page, a captive portal): nothing of it is stored.
    pub html_rate: f64,
    /// A batch request answered `200 OK` whose body (the per-item results)
    /// stops half-way: the connection is dropped mid-body. Nothing is stored.
    pub cut_rate: f64,
    /// A batch request refused as a whole with `whole_fail_status` (e.g. 429
    /// from a rate limiter in front of the API). Nothing is stored.
    pub whole_fail_rate: f64,
    pub whole_fail_status: u16,
    /// In every batch of two or more, the first item is listed twice, once
    /// 201 and once 503, and is not stored.
    pub conflicting_duplicate: bool,
    /// Only the first half of each batch (rounded up) is accepted and listed
    /// in the results (Elasticsearch's bulk API under load); the rest is not
    /// listed and not stored.
    pub accept_half: bool,
    /// Per item, with these probabilities (summing to at most 1), the item's
    /// result is this status instead of the usual decision (a success status
    /// stores it, any other does not).
    pub item_mix: Vec<ItemMix>,
    /// Bytes of padding (a `pad` member after `items`) in every per-item
    /// results answer, sent slowly (512 KiB every 50 ms): an answer far
    /// larger than its batch, which a client reading it whole holds in
    /// memory, and many such answers being read at once. It changes nothing
    /// of what is stored.
    pub answer_padding: usize,
}

/// One status of [`BatchFaults::item_mix`] and its probability.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ItemMix {
    pub status: u16,
    pub rate: f64,
}

/// A fault drawn for a whole batch request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WholeFault {
    Html,
    Cut,
    Status(u16),
}

/// The status items of a faulty answer are booked with: not stored.
pub const NOT_STORED: StatusCode = StatusCode::BAD_GATEWAY;

impl BatchFaults {
    /// Whether any fault is configured (a healthy endpoint draws nothing).
    pub fn any(&self) -> bool {
        *self != BatchFaults::default()
    }

    /// The whole-request fault for this request, if one is drawn.
    pub fn draw_whole(&self) -> Option<WholeFault> {
        let roll = |rate: f64| rate > 0.0 && rand::random::<f64>() < rate;
        if roll(self.html_rate) {
            Some(WholeFault::Html)
        } else if roll(self.cut_rate) {
            Some(WholeFault::Cut)
        } else if roll(self.whole_fail_rate) {
            Some(WholeFault::Status(self.whole_fail_status))
        } else {
            None
        }
    }

    /// An item's status from `item_mix`, if one is drawn.
    pub fn draw_item(&self) -> Option<u16> {
        if self.item_mix.is_empty() {
            return None;
        }
        let mut roll = rand::random::<f64>();
        for m in &self.item_mix {
            if roll < m.rate {
                return Some(m.status);
            }
            roll -= m.rate;
        }
        None
    }
}

/// The answer of a whole-request fault. `results`: the per-item results the
/// API would have sent (a cut answer sends their first half, then drops the
/// connection).
pub fn whole_answer(fault: WholeFault, results: &[u8]) -> Response {
    match fault {
        WholeFault::Html => (
            StatusCode::OK,
            [(header::CONTENT_TYPE, "text/html; charset=utf-8")],
            "<!DOCTYPE html><html><head><title>Service</title></head>\
             <body><h1>We'll be right back</h1><p>The service is under maintenance.</p>\
             </body></html>",
        )
            .into_response(),
        WholeFault::Cut => {
            let half = Bytes::copy_from_slice(&results[..results.len() / 2]);
            let chunks: Vec<Result<Bytes, std::io::Error>> = vec![
                Ok(half),
                Err(std::io::Error::new(
                    std::io::ErrorKind::ConnectionReset,
                    "the stand-in drops the connection mid-body",
                )),
            ];
            let body = Body::from_stream(futures_util::stream::iter(chunks));
            (
                StatusCode::OK,
                [(header::CONTENT_TYPE, "application/json")],
                body,
            )
                .into_response()
        }
        WholeFault::Status(s) => StatusCode::from_u16(s)
            .unwrap_or(StatusCode::INTERNAL_SERVER_ERROR)
            .into_response(),
    }
}

/// A per-item results answer (`results`: the JSON array) with `padding`
/// bytes of spaces in a `pad` member after it, sent in 512 KiB chunks 50 ms
/// apart (`BatchFaults::answer_padding`).
pub fn padded_answer(status: StatusCode, results: Vec<u8>, padding: usize) -> Response {
    const CHUNK: usize = 512 * 1024;
    let mut head = b"{\"items\":".to_vec();
    head.extend_from_slice(&results);
    head.extend_from_slice(b",\"pad\":\"");
    let spaces = Bytes::from(vec![b' '; CHUNK]);
    let mut parts: Vec<Bytes> = vec![Bytes::from(head)];
    let mut left = padding;
    while left > 0 {
        let n = left.min(CHUNK);
        parts.push(spaces.slice(..n));
        left -= n;
    }
    parts.push(Bytes::from_static(b"\"}"));
    let stream = futures_util::stream::unfold(parts.into_iter(), |mut parts| async move {
        let part = parts.next()?;
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        Some((Ok::<Bytes, std::io::Error>(part), parts))
    });
    (
        status,
        [(header::CONTENT_TYPE, "application/json")],
        Body::from_stream(stream),
    )
        .into_response()
}

/// The results a batch answer lists, and what each item is booked as, once
/// the per-item faults are applied to the items' decided `statuses`:
/// `item_mix` replaces a status; `accept_half` leaves the second half out
/// (booked as not stored); `conflicting_duplicate` lists the first item
/// twice, 201 and 503 (booked as not stored). Each listed result is the
/// index of its item and a status.
pub fn shape_results(faults: &BatchFaults, statuses: &mut [StatusCode]) -> Vec<(usize, u16)> {
    mix_items(faults, statuses);
    list_results(faults, statuses)
}

/// [`shape_results`]' first step: `item_mix` replaces the drawn items' statuses.
pub fn mix_items(faults: &BatchFaults, statuses: &mut [StatusCode]) {
    for s in statuses.iter_mut() {
        if let Some(mixed) = faults.draw_item() {
            *s = StatusCode::from_u16(mixed).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
        }
    }
}

/// [`shape_results`]' second step: the results listed, `accept_half` and
/// `conflicting_duplicate` applied.
pub fn list_results(faults: &BatchFaults, statuses: &mut [StatusCode]) -> Vec<(usize, u16)> {
    let n = statuses.len();
    let accepted = if faults.accept_half { n.div_ceil(2) } else { n };
    let mut listed: Vec<(usize, u16)> = Vec::with_capacity(n + 1);
    for (i, s) in statuses.iter_mut().enumerate() {
        if i >= accepted {
            *s = NOT_STORED;
            continue;
        }
        if i == 0 && faults.conflicting_duplicate && n >= 2 {
            *s = NOT_STORED;
            listed.push((0, 201));
            listed.push((0, 503));
            continue;
        }
        listed.push((i, s.as_u16()));
    }
    listed
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn half_accepted_and_conflicting_results_book_what_was_not_stored() {
        let f = BatchFaults {
            accept_half: true,
            conflicting_duplicate: true,
            ..BatchFaults::default()
        };
        let mut statuses = vec![StatusCode::OK; 5];
        let listed = shape_results(&f, &mut statuses);
        assert_eq!(listed, vec![(0, 201), (0, 503), (1, 200), (2, 200)]);
        assert_eq!(
            statuses,
            vec![
                NOT_STORED,
                StatusCode::OK,
                StatusCode::OK,
                NOT_STORED,
                NOT_STORED
            ]
        );
    }

    #[test]
    fn nothing_is_drawn_without_faults() {
        let f = BatchFaults::default();
        assert!(!f.any());
        assert_eq!(f.draw_whole(), None);
        assert_eq!(f.draw_item(), None);
    }

    #[test]
    fn certain_faults_are_always_drawn() {
        let f = BatchFaults {
            html_rate: 1.0,
            ..BatchFaults::default()
        };
        assert_eq!(f.draw_whole(), Some(WholeFault::Html));
        let f = BatchFaults {
            whole_fail_rate: 1.0,
            whole_fail_status: 429,
            item_mix: vec![ItemMix {
                status: 503,
                rate: 1.0,
            }],
            ..BatchFaults::default()
        };
        assert_eq!(f.draw_whole(), Some(WholeFault::Status(429)));
        assert_eq!(f.draw_item(), Some(503));
    }
}
