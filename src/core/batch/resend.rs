//! Events a 2xx batch answer left without a result while it accepted others
//! of the request (an API that applies part of each batch: Elasticsearch's
//! bulk API under load, a handler that stops at a time limit) are sent again
//! at once, in their group's next batch, before their try ends: the request
//! made progress, so the API is up and the event is not at fault. An event is
//! sent again this way at most [`FREE_RESENDS`] times per try; after that its
//! answer is its "no result" (transient: its try counts, and it is retried,
//! dead-lettered and its DLQ rounds spent as any transient failure's). An
//! answer that accepted nothing (unreadable, every item unlisted or refused)
//! ends every try at once, as before.
//!
//! An ordered run's events are never sent again this way: its walk
//! (`delivery::ordered`) sends the run again from its first failure, in
//! offset order.

use super::ItemResult;

/// The most times an event is sent again at once within one try.
pub(crate) const FREE_RESENDS: u8 = 4;

/// Whether a batch answer's `results` accept any item: a 2xx result, or
/// a 409 (already there: delivered too).
pub(crate) fn accepted_any(results: &[ItemResult<'_>]) -> bool {
    results.iter().any(|r| match r {
        ItemResult::Listed { status, .. } => (200..300).contains(status) || *status == 409,
        ItemResult::Missing(_) => false,
    })
}

/// Whether the item whose result is `result` is sent again at once
/// (module docs): it has no result, the answer accepted another item
/// (`progress`), it was sent again fewer than [`FREE_RESENDS`] times in this
/// try (`resent`), and it is not a member of an ordered run (`in_run`).
pub(crate) fn resend_at_once(
    result: &ItemResult<'_>,
    progress: bool,
    resent: u8,
    in_run: bool,
) -> bool {
    matches!(result, ItemResult::Missing(_)) && progress && resent < FREE_RESENDS && !in_run
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::batch::NoResult;

    fn listed(status: u16) -> ItemResult<'static> {
        ItemResult::Listed {
            status,
            position: 0,
            element: "{}",
        }
    }

    const MISSING: ItemResult<'static> = ItemResult::Missing(NoResult::NotListed);

    #[test]
    fn only_an_answer_that_accepted_an_item_made_progress() {
        assert!(accepted_any(&[listed(201), MISSING]));
        assert!(accepted_any(&[MISSING, listed(409)]));
        assert!(!accepted_any(&[listed(503), listed(400), MISSING]));
        assert!(!accepted_any(&[MISSING, MISSING]));
        assert!(!accepted_any(&[]));
    }

    #[test]
    fn a_missing_result_goes_again_a_bounded_number_of_times() {
        for resent in 0..FREE_RESENDS {
            assert!(resend_at_once(&MISSING, true, resent, false), "{resent}");
        }
        assert!(!resend_at_once(&MISSING, true, FREE_RESENDS, false));
        assert!(!resend_at_once(&MISSING, false, 0, false), "no progress");
        assert!(!resend_at_once(&MISSING, true, 0, true), "a run's");
        assert!(!resend_at_once(&listed(503), true, 0, false), "a result");
        assert!(!resend_at_once(&listed(200), true, 0, false));
    }
}
