//! What an API's answer means: the one place delivery reads it. From what a
//! call was told (a status, maybe "no result for this event" out of a batch's
//! answer, or no answer at all) to its three meanings at once: what the
//! breaker hears of the call ([`Heard`]), what the adaptive limit learns of
//! the API's capacity ([`Load`]) and what it means for the event it answers
//! ([`Verdict`]). Every path reads answers here — an event alone, a batch,
//! an ordered run, a DLQ round — and each answer once (`delivery::hear`), so
//! they cannot disagree (a batch taken as delivered while its events were
//! not, a status the breaker, the limit and the event read differently).
//! Nothing else on the delivery path calls [`StatusPolicy::classify`].

use super::batch::NoResult;
use super::classify::{
    heard_status, heard_transport, FailureClass, FailureReason, Heard, StatusVerdict,
    TransportFailure,
};
use super::status_policy::StatusPolicy;

/// What a call was told.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Said {
    /// An HTTP status — for an event of a batch, its own result's status, or
    /// (`no_result`) why its batch's answer holds none for it.
    Status {
        status: u16,
        no_result: Option<NoResult>,
        /// A 2xx batch answer whose per-item results refuse items with
        /// 429 or 503: the API is up and wants fewer items at once.
        items_refused: bool,
    },
    /// No answer: the request failed on the way, or its answer could not be
    /// read.
    Nothing(TransportFailure),
}

/// What an answer means for the event it answers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Verdict {
    Delivered,
    Failed {
        class: FailureClass,
        reason: FailureReason,
    },
}

/// What a call's answer says of the API's capacity: the adaptive limit's
/// sample, with the call's round trip (`core::concurrency::Sample`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Load {
    /// An answer that is not back-pressure (2xx, or a 4xx that is the event's).
    Answered,
    /// 429, 503, items refused with them, or a timeout: the API (or
    /// something before it) is saturated.
    BackPressure,
    /// Nothing to learn (a refused connection, a request not made): the
    /// breaker deals with outages.
    Nothing,
}

/// The meanings of one answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Reading {
    /// What the breaker hears of the call.
    pub call: Heard,
    /// What the adaptive limit learns of the call.
    pub load: Load,
    /// What it means for the event.
    pub event: Verdict,
}

/// Reads `said` under `policy` (`[api.status]` over the defaults).
/// `back_pressure`: the adaptive limit answers this status (a 429 with the
/// limit on), so the breaker hears nothing of it.
///
/// Fails closed: an event whose batch answer holds no result for it is not
/// delivered, whatever the batch's status — it is sent again.
pub(crate) fn read(policy: &StatusPolicy, back_pressure: bool, said: Said) -> Reading {
    match said {
        Said::Status {
            status,
            no_result,
            items_refused,
        } => {
            let verdict = policy.classify(status);
            let event = match (no_result, verdict) {
                (Some(why), _) => Verdict::Failed {
                    class: FailureClass::Transient,
                    reason: FailureReason::NoResult(why),
                },
                (None, StatusVerdict::Delivered) => Verdict::Delivered,
                (None, StatusVerdict::Failed(class)) => Verdict::Failed {
                    class,
                    reason: FailureReason::Http(status),
                },
            };
            let load = match status {
                429 | 503 => Load::BackPressure,
                _ if items_refused => Load::BackPressure,
                _ => Load::Answered,
            };
            Reading {
                call: heard_status(status, verdict, back_pressure),
                load,
                event,
            }
        }
        Said::Nothing(kind) => Reading {
            call: heard_transport(kind),
            load: match kind {
                TransportFailure::Timeout => Load::BackPressure,
                _ => Load::Nothing,
            },
            event: Verdict::Failed {
                class: kind.class(),
                reason: FailureReason::Transport(kind),
            },
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::batch::Unreadable;
    use crate::core::classify::{CallOutcome, TransportFailure};
    use proptest::prelude::*;

    fn status(status: u16) -> Said {
        Said::Status {
            status,
            no_result: None,
            items_refused: false,
        }
    }

    #[test]
    fn a_2xx_is_delivered_for_the_event_and_the_breaker() {
        let r = read(&StatusPolicy::default(), false, status(200));
        assert_eq!(r.event, Verdict::Delivered);
        assert_eq!(r.call, Heard::Delivered);
    }

    #[test]
    fn no_result_fails_the_event_whatever_the_status() {
        for s in [200, 207, 299] {
            let why = NoResult::Unreadable(Unreadable::NotJson);
            let r = read(
                &StatusPolicy::default(),
                false,
                Said::Status {
                    status: s,
                    no_result: Some(why),
                    items_refused: false,
                },
            );
            assert_eq!(
                r.event,
                Verdict::Failed {
                    class: FailureClass::Transient,
                    reason: FailureReason::NoResult(why),
                },
                "status {s}"
            );
        }
    }

    #[test]
    fn back_pressure_is_not_the_breakers_business_but_fails_the_event() {
        let r = read(&StatusPolicy::default(), true, status(429));
        assert_eq!(r.call, Heard::Nothing);
        assert_eq!(
            r.event,
            Verdict::Failed {
                class: FailureClass::Transient,
                reason: FailureReason::Http(429),
            }
        );
    }

    #[test]
    fn a_systemic_status_is_a_hypothesis_for_the_breaker() {
        let r = read(&StatusPolicy::default(), false, status(401));
        assert!(matches!(r.call, Heard::Systemic(_)), "{:?}", r.call);
        assert!(matches!(
            r.event,
            Verdict::Failed {
                class: FailureClass::Systemic,
                ..
            }
        ));
    }

    #[test]
    fn a_request_that_never_left_tells_the_breaker_nothing() {
        let r = read(
            &StatusPolicy::default(),
            false,
            Said::Nothing(TransportFailure::Request),
        );
        assert_eq!(r.call, Heard::Nothing);
        assert!(matches!(r.event, Verdict::Failed { .. }));
    }

    #[test]
    fn a_timeout_is_a_failed_call() {
        let r = read(
            &StatusPolicy::default(),
            false,
            Said::Nothing(TransportFailure::Timeout),
        );
        assert!(
            matches!(r.call, Heard::Outcome(CallOutcome::Failed)),
            "{:?}",
            r.call
        );
    }

    /// What the adaptive limit learns: 429, 503 and timeouts are
    /// back-pressure, as are items refused with them in a 2xx batch answer;
    /// a refused connection teaches nothing.
    #[test]
    fn the_load_an_answer_shows() {
        let p = StatusPolicy::default();
        for (s, load) in [
            (200, Load::Answered),
            (404, Load::Answered),
            (429, Load::BackPressure),
            (503, Load::BackPressure),
        ] {
            assert_eq!(read(&p, false, status(s)).load, load, "status {s}");
        }
        let refused = Said::Status {
            status: 200,
            no_result: None,
            items_refused: true,
        };
        let r = read(&p, false, refused);
        assert_eq!((r.load, r.event), (Load::BackPressure, Verdict::Delivered));
        let timeout = read(&p, false, Said::Nothing(TransportFailure::Timeout));
        assert_eq!(timeout.load, Load::BackPressure);
        let refused = read(&p, false, Said::Nothing(TransportFailure::ConnectRefused));
        assert_eq!(refused.load, Load::Nothing);
    }

    proptest! {
        /// The event and the breaker never read one status two ways: the
        /// event is delivered exactly when the breaker hears a delivery
        /// (back-pressure aside, which the breaker does not hear).
        #[test]
        fn the_two_meanings_agree(s in 100u16..600, bp in any::<bool>()) {
            let r = read(&StatusPolicy::default(), bp, status(s));
            let delivered = r.event == Verdict::Delivered;
            if bp {
                prop_assert_eq!(r.call, Heard::Nothing);
            } else {
                prop_assert_eq!(delivered, r.call == Heard::Delivered);
            }
        }
    }
}
