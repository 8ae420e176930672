//! Stage 8, the DLQ drain: a DLQ record's turn. The policy (and for deadline
//! policies the source of truth) decides; a round is one try at the drain's
//! own pace and concurrency, and its answer sends the event back to the DLQ
//! with one more retry, to the parking lot, or delivers it.

use super::durable::DlqWrite;
use super::enrich::SourceOfTruth;
use super::hear::Answered;
use super::http::Api;
use super::report::Failure;
use super::request::{Body, Source};
use super::send::Made;
use super::token::{CompletionToken, Finished};
use super::{Deliverer, Item};
use crate::core::attempt::{self, Round, RoundNext};
use crate::core::classify::{FailureClass, FailureReason};
use crate::core::dlq_policy::{self, DlqDecision, SourceCheck};
use crate::core::envelope::{Envelope, ErrorInfo, OriginHeader};
use crate::core::event::DecodeError;
use crate::core::input::{decode_record, Decoded, RecordIn};
use crate::core::schema;
use crate::metrics as m;
use crate::runtime::now_ms;
use bytes::Bytes;
use std::sync::Arc;

/// Why a DLQ record's event cannot be decoded now.
pub(super) enum Undecodable {
    /// Never: parked with this reason and message.
    Parked(FailureReason, String),
    /// The schema registry cannot be asked for the record's schema now.
    RegistryUnavailable(String),
}

/// Stage 8's parts: the source of truth deadline policies ask. (The
/// drain's own, smaller limit and its pace are its share of the permits:
/// `permits::Permits::drain_round`.)
pub(super) struct Redelivery {
    source: Option<Arc<SourceOfTruth>>,
}

impl Redelivery {
    pub(super) fn new(source: Option<Arc<SourceOfTruth>>) -> Redelivery {
        Redelivery { source }
    }
}

impl<A: Api, W: DlqWrite> Deliverer<A, W> {
    /// A DLQ event's turn: check the policy (and the source of truth for deadline
    /// policies), then one delivery try at the drain's pace. On failure it goes
    /// back to the DLQ with `dlq_retries + 1`, or to the parking lot once the
    /// policy says so. Every drop is parked with its reason and counted.
    /// `None`: the partition was handed over before the request (no outcome).
    pub(super) async fn retry_from_dlq(
        &self,
        item: &Item,
        env: &Envelope,
        token: &CompletionToken,
    ) -> Option<Finished> {
        let cfg = &self.pipeline.config;
        let policy = cfg.retry.policy_for(env.event_type.as_deref());
        let now = now_ms();
        let check = if dlq_policy::needs_source_check(policy, env.first_dlq_at_ms, now) {
            Some(self.source_check(env).await)
        } else {
            None
        };
        if let Some(c) = check {
            metrics::counter!(m::RECONCILIATION, "result" => c.as_str()).increment(1);
        }
        match dlq_policy::decide(
            policy,
            env.dlq_retries,
            env.first_dlq_at_ms,
            env.not_before_ms,
            now,
            check,
        ) {
            DlqDecision::Drop { reason } => Some(
                self.writes
                    .drop_from_dlq(
                        item,
                        env,
                        FailureReason::DlqPolicy(reason),
                        format!("{} policy: {reason}", policy.as_str()),
                    )
                    .await,
            ),
            DlqDecision::KeepInDlq { reason } => {
                let not_before = dlq_policy::next_not_before(
                    now,
                    env.dlq_retries.max(1),
                    cfg.degraded.dlq_backoff_base_ms(),
                    cfg.degraded.dlq_backoff_cap_ms(),
                );
                let mut again = env.clone();
                again.not_before_ms = not_before;
                again.last_error.message = format!("kept in the DLQ: {reason}");
                match self.writes.rewrite_dlq(item, again).await {
                    Ok(at) => Some(Finished::DeadLettered {
                        reason: reason.to_string(),
                        at,
                    }),
                    Err(parked) => Some(parked),
                }
            }
            DlqDecision::NotYet { .. } => match self.writes.rewrite_dlq(item, env.clone()).await {
                Ok(at) => Some(Finished::DeadLettered {
                    reason: "not_yet".into(),
                    at,
                }),
                Err(parked) => Some(parked),
            },
            DlqDecision::Deliver => self.redeliver(item, env, policy, token).await,
        }
    }

    /// The event an envelope carries, decoded in the configured input format
    /// from its payload and the origin record's headers and coordinates (as
    /// the main path decoded it). A registry format asks the registry for the
    /// schema the payload names (cached: one fetch per id for the process). An
    /// envelope with a payload reference has nothing to decode here (`courier
    /// dlq replay` reads it back).
    pub(super) async fn decode_envelope(&self, env: &Envelope) -> Result<Decoded, Undecodable> {
        if env.omitted.is_some() {
            return Err(Undecodable::Parked(
                FailureReason::UnreadableEnvelope,
                DecodeError::Empty.to_string(),
            ));
        }
        let cfg = &self.pipeline.config;
        let payload = Bytes::from(env.payload.clone());
        let headers = OriginHeader::to_record(&env.origin_headers);
        let rec = RecordIn {
            value: (!payload.is_empty()).then_some(&payload),
            headers: &headers,
            topic: &env.origin.topic,
            partition: env.origin.partition,
            offset: env.origin.offset,
        };
        let (json, opts) = (cfg.input.json(), cfg.pipeline.decode_options());
        let Some(registry) = self.pipeline.registry.as_ref() else {
            return decode_record(&rec, cfg.input.format, &json, &opts).map_err(|e| {
                Undecodable::Parked(FailureReason::UnreadableEnvelope, e.to_string())
            });
        };
        // An unframed payload has no schema, a refused one (an unknown id, a
        // reference that leads nowhere) never will: the decoding parks it
        // with the reason the main path gives.
        let schema = registry
            .schema_of(&payload)
            .await
            .map_err(Undecodable::RegistryUnavailable)?;
        schema::decode_framed(
            &rec,
            cfg.input.format,
            |_| schema.as_deref(),
            &json,
            &opts,
            cfg.input.json_options(),
        )
        .map_err(|(reason, message)| Undecodable::Parked(FailureReason::Input(reason), message))
    }

    /// The source of truth asked by the event's own key: the one its body
    /// names (`input.key`), else its record's, as the main path keys it. An
    /// event that cannot be decoded now (the registry cannot be asked) has no
    /// key to ask by: the check is not made, never made by another key.
    pub(super) async fn source_check(&self, env: &Envelope) -> SourceCheck {
        let decoded = match self.decode_envelope(env).await {
            Ok(d) => d,
            Err(e) => {
                let why = match e {
                    Undecodable::RegistryUnavailable(why) | Undecodable::Parked(_, why) => why,
                };
                tracing::warn!(id = env.event_id.as_deref().unwrap_or("-"), error = %why, "source-of-truth check: the event cannot be decoded now; it stays in the DLQ");
                return SourceCheck::QueryFailed;
            }
        };
        let key = decoded.key.as_ref().or(env.key.as_ref());
        let (Some(src), Some(key)) = (&self.drain.source, key) else {
            return SourceCheck::QueryFailed;
        };
        let version = decoded.event.entity_version;
        match src.current_version(&String::from_utf8_lossy(key)).await {
            Ok(current) => dlq_policy::compare_versions(version, current),
            Err(e) => {
                tracing::warn!(id = env.event_id.as_deref().unwrap_or("-"), error = %e, "source-of-truth check failed; the event stays in the DLQ");
                SourceCheck::QueryFailed
            }
        }
    }

    pub(super) async fn redeliver(
        &self,
        item: &Item,
        env: &Envelope,
        policy: dlq_policy::DlqRetry,
        token: &CompletionToken,
    ) -> Option<Finished> {
        let Some(id) = env.event_id.clone() else {
            return Some(
                self.writes
                    .drop_from_dlq(
                        item,
                        env,
                        FailureReason::UnreadableEnvelope,
                        "DLQ envelope without an event id".into(),
                    )
                    .await,
            );
        };
        let Decoded {
            event,
            key,
            body_type,
        } = match self.decode_envelope(env).await {
            Ok(d) => d,
            Err(Undecodable::Parked(reason, message)) => {
                return Some(self.writes.drop_from_dlq(item, env, reason, message).await)
            }
            // Not the event's fault, and not the API's: back to the DLQ
            // without a retry used (the breaker does not hear of it).
            Err(Undecodable::RegistryUnavailable(detail)) => {
                let failure = Failure::registry_unavailable(detail);
                return Some(Box::pin(self.failed_round(item, env, policy, failure, None)).await);
            }
        };
        let headers = OriginHeader::to_record(&env.origin_headers);
        let payload = Bytes::from(env.payload.clone());
        let src = Source {
            headers: Some(&headers),
            key: key.as_deref().or(env.key.as_deref()),
            body_type,
            payload: Some(&payload),
            route: item.target.route,
        };
        // The call made (an enrichment database error is not the API's, and
        // the breaker must not hear of it: none).
        let mut made = None;
        let answer = match self.build.request(&src, &event).await {
            Ok(Body::Send { body, out }) => {
                // Each wait ends at once when the partition is handed over,
                // before it takes a drain permit, a rate slot or a breaker
                // admission; no request is made for it.
                if token.cancelled() {
                    return None;
                }
                let _permit = self.permits.drain_round(token).await?;
                let round = Some(env.dlq_retries + 1);
                let (r, m) = self
                    .caller
                    .call(&id, &out, body, round, token, false)
                    .await?;
                made = Some(m);
                r
            }
            Ok(Body::Park { reason, message }) => {
                return Some(self.writes.drop_from_dlq(item, env, reason, message).await)
            }
            // The database, not the API: back to the DLQ.
            Err(e) => self.caller.calls.ears.not_sent(format!("enrichment: {e}")),
        };
        Some(Box::pin(self.redelivered(item, env, policy, answer, made)).await)
    }

    /// What a DLQ round's answer means for the event (`called`: the API was
    /// asked, with the call's number, so the breaker hears of it).
    pub(super) async fn redelivered(
        &self,
        item: &Item,
        env: &Envelope,
        policy: dlq_policy::DlqRetry,
        answer: Answered,
        made: Option<Made>,
    ) -> Finished {
        let Some(failure) = Failure::in_answer(answer) else {
            metrics::counter!(m::DLQ_REDELIVERED).increment(1);
            self.hot.delivered.increment(1);
            return Finished::Delivered;
        };
        self.failed_round(item, env, policy, failure, made).await
    }

    /// A DLQ round that failed: back to the DLQ (with one more retry, or none
    /// used for an unrefuted systemic failure), or parked, as
    /// `attempt::decide_round` says.
    async fn failed_round(
        &self,
        item: &Item,
        env: &Envelope,
        policy: dlq_policy::DlqRetry,
        failure: Failure,
        made: Option<Made>,
    ) -> Finished {
        let cfg = &self.pipeline.config;
        let mut refuted = false;
        // The call was heard when it was answered; a systemic answer is
        // judged here (refuted by a later delivered call: this event's
        // failure, a round used up like a transient one).
        if let Some(made) = made
            .filter(|_| failure.class == FailureClass::Systemic && failure.reason.reached_the_api())
        {
            refuted = self.systemic_refuted_in_round(made, &failure);
        }
        self.reports.report(&failure);
        let reason = failure.reason.as_str().to_string();
        let message = format!("DLQ round {}: {}", env.dlq_retries + 1, failure.message(""));
        let error = failure.error(message.trim_end());
        let now = now_ms();
        let round = Round {
            dlq_retries: env.dlq_retries,
            first_dlq_at_ms: env.first_dlq_at_ms,
            now_ms: now,
            backoff_base_ms: cfg.degraded.dlq_backoff_base_ms(),
            backoff_cap_ms: cfg.degraded.dlq_backoff_cap_ms(),
        };
        let again = match attempt::decide_round(policy, failure.class, refuted, round) {
            RoundNext::Park => {
                let mut parked = env.clone();
                parked.last_error = error;
                let done = self.writes.park_envelope(item, parked).await;
                self.reports.parked_after(&failure);
                return done;
            }
            RoundNext::Drop { why } => {
                // A refuted systemic answer is recorded as the transient one it became.
                let class = match failure.class {
                    FailureClass::Systemic => FailureClass::Transient,
                    c => c,
                };
                let why_error = ErrorInfo::new(
                    class.into(),
                    FailureReason::DlqPolicy(why),
                    failure.status,
                    message.trim_end(),
                );
                let last = env.retried(why_error, now);
                return self.writes.drop_enveloped(last, why).await;
            }
            // Not the event's fault: back to the DLQ without using up a retry.
            RoundNext::Again { not_before_ms } => {
                let mut again = env.clone();
                again.not_before_ms = not_before_ms;
                again.last_error = error;
                return match self.writes.rewrite_dlq(item, again).await {
                    Ok(at) => Finished::DeadLettered { reason, at },
                    Err(parked) => parked,
                };
            }
            RoundNext::Retry { not_before_ms } => env.retried(error, not_before_ms),
        };
        let at = match self.writes.rewrite_dlq(item, again).await {
            Ok(at) => at,
            Err(parked) => return parked,
        };
        metrics::counter!(m::DLQ_RETRIED, "reason" => reason.clone()).increment(1);
        Finished::DeadLettered { reason, at }
    }
}
