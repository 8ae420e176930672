//! Every metric's name, and [`ALL`]: each name with its description (the
//! `# HELP` line), registered at start so every series is described.

pub(crate) const CONSUMED: &str = "courier_consumed_total";
pub(crate) const DELIVERED: &str = "courier_delivered_total";
pub(crate) const DELIVERY_ATTEMPTS: &str = "courier_delivery_attempts_total";
pub(crate) const DELIVERY_ERRORS: &str = "courier_delivery_errors_total";
pub const DELIVERY_LATENCY: &str = "courier_delivery_latency_seconds";
pub const EVENT_AGE: &str = "courier_event_age_seconds";
pub(crate) const IN_FLIGHT: &str = "courier_in_flight";
pub(crate) const PARKED: &str = "courier_parked_total";
pub(crate) const DLQ_WRITTEN: &str = "courier_dlq_written_total";
pub(crate) const DLQ_WRITE_FAILURES: &str = "courier_dlq_write_failures_total";
pub(crate) const PRODUCE_REFUSED: &str = "courier_produce_refused_total";
pub(crate) const ENVELOPE_REFERENCES: &str = "courier_envelope_payload_omitted_total";
pub(crate) const COMMIT_WATERMARK: &str = "courier_commit_watermark";
pub(crate) const PARTITION_PAUSED: &str = "courier_partition_paused";
pub(crate) const ACTOR_RESTARTS: &str = "courier_actor_restarts_total";
pub(crate) const ENRICH_CACHE: &str = "courier_enrichment_cache_total";
pub(crate) const ASSIGNED_PARTITIONS: &str = "courier_assigned_partitions";
pub(crate) const BREAKER_STATE: &str = "courier_breaker_state";
pub(crate) const BREAKER_TRANSITIONS: &str = "courier_breaker_transitions_total";
pub(crate) const MARKER: &str = "courier_marker_alive";
pub(crate) const HEALTH_SOURCE: &str = "courier_health_source";
pub(crate) const API_UNAVAILABLE: &str = "courier_api_unavailable";
pub(crate) const PARTITION_MODE: &str = "courier_partition_mode";
pub(crate) const MODE_TRANSITIONS: &str = "courier_partition_mode_transitions_total";
pub(crate) const DLQ_RETRIED: &str = "courier_dlq_retried_total";
pub(crate) const DLQ_DROPPED: &str = "courier_dlq_dropped_total";
pub(crate) const DLQ_REDELIVERED: &str = "courier_dlq_redelivered_total";
pub(crate) const RECONCILIATION: &str = "courier_reconciliation_total";
pub(crate) const DLQ_LAG: &str = "courier_dlq_lag";
pub(crate) const CONSUMER_LAG: &str = "courier_consumer_lag";
pub(crate) const MEMORY_ALLOCATED: &str = "courier_memory_allocated_bytes";
pub(crate) const MEMORY_RESIDENT: &str = "courier_memory_resident_bytes";
pub(crate) const MEMORY_ALLOCATIONS: &str = "courier_memory_allocations_total";
pub(crate) const MEMORY_BUDGET: &str = "courier_memory_budget_bytes";
pub(crate) const MEMORY_BUDGET_USED: &str = "courier_memory_budget_used_bytes";
pub(crate) const BUFFERED_RECORDS: &str = "courier_buffered_records";
pub(crate) const API_CONCURRENCY_LIMIT: &str = "courier_api_concurrency_limit";
pub(crate) const API_RATE_LIMIT: &str = "courier_api_rate_limit_per_sec";
pub(crate) const API_RATE_PERMITS: &str = "courier_api_rate_permits_total";
pub(crate) const OFFSETS_SKIPPED: &str = "courier_offsets_skipped_total";
pub(crate) const REVOKED_WORK: &str = "courier_revoked_work_total";
pub(crate) const TAKEOVER: &str = "courier_takeover_seconds";
pub(crate) const OFFSET_COMMITS: &str = "courier_offset_commits_total";
// Hostile headers (issue 23 item 3).
pub(crate) const HEADER_NAMES_NOT_UTF8: &str = "courier_header_names_not_utf8_total";
// Systemic answers refuted by the API (issue 23 item 4).
pub(crate) const SYSTEMIC_DEMOTED: &str = "courier_systemic_demoted_total";
// Positions that moved under Courier (issue 23, item 1).
pub(crate) const POSITION_RESETS: &str = "courier_position_resets_total";
pub(crate) const POSITIONS_PASSED: &str = "courier_positions_passed_markers_total";
// DLQ records handed back beyond their half of the in-flight budget (issue 54).
pub(crate) const DLQ_REWINDS: &str = "courier_dlq_rewinds_total";
// Credentials toward the API (`auth`).
pub(crate) const AUTH_TOKEN_REQUESTS: &str = "courier_auth_token_requests_total";
pub(crate) const AUTH_TOKEN_EXPIRY: &str = "courier_auth_token_expiry_timestamp_seconds";
pub(crate) const AUTH_RETRIES: &str = "courier_auth_retries_total";
pub(crate) const SECRET_RELOADS: &str = "courier_secret_reloads_total";
// Batch delivery (`delivery::batch`).
pub(crate) const BATCH_REQUESTS: &str = "courier_batch_requests_total";
pub(crate) const BATCH_EVENTS: &str = "courier_batch_events";
pub(crate) const BATCH_SPLIT_REQUESTS: &str = "courier_batch_split_requests_total";
pub(crate) const BATCH_SHRUNK: &str = "courier_batch_shrunk_total";
pub(crate) const BATCH_RESULTS_UNREADABLE: &str = "courier_batch_results_unreadable_total";
pub(crate) const BATCH_SPLIT_SINGLES_RATIO: &str = "courier_batch_split_singles_ratio";
pub(crate) const ORDERED_RESENT: &str = "courier_ordered_resent_total";
pub(crate) const BATCH_RESENT: &str = "courier_batch_resent_total";
// Deleted-unread accounting (`core::deleted`, `Pipeline::deleted_unread`).
pub(crate) const DELETED_UNREAD: &str = "courier_events_deleted_unread_total";
// Destinations (`core::destination`, `core::partition::outage`).
pub(crate) const DIVERTED: &str = "courier_destination_diverted_total";
pub(crate) const HELD_OUT: &str = "courier_destination_held_out";
// Filters and route predicates (`core::expr`, issue 58).
pub(crate) const FILTERED: &str = "courier_filtered_total";
pub(crate) const FILTER_WOULD_DROP: &str = "courier_filter_would_drop_total";
pub(crate) const ROUTE_REPICKED: &str = "courier_dlq_route_repicked_total";

/// Every metric Courier registers, with its help text. Dashboards and alert rules
/// may only use these (a test checks it).
pub const ALL: &[(&str, &str)] = &[
    (
        FILTERED,
        "Events a [[filters]] entry dropped (not delivered, offset committed as a delivered one's), by filter.",
    ),
    (
        FILTER_WOULD_DROP,
        "Events a dry_run filter would have dropped (delivered all the same), by filter.",
    ),
    (
        ROUTE_REPICKED,
        "DLQ events whose recorded route (api.routes name) no longer exists: their route chosen again from the current routes.",
    ),
    (
        SYSTEMIC_DEMOTED,
        "Events parked after api.systemic_budget systemic answers once calls sent after their first refused one were delivered, by reason (http_403, tls_*, ...).",
    ),
    (CONSUMED, "Records consumed, by topic (main or DLQ)."),
    (
        DELIVERED,
        "Events the API accepted (2xx or 409), main path and DLQ drain.",
    ),
    (
        DELIVERY_ATTEMPTS,
        "HTTP calls made on the main path, retries included.",
    ),
    (
        DELIVERY_ERRORS,
        "Failed delivery attempts, by class and reason.",
    ),
    (
        DELIVERY_LATENCY,
        "Seconds from the first try to the API's acceptance of an event.",
    ),
    (
        EVENT_AGE,
        "Seconds from the event's Kafka timestamp to its delivery (end to end).",
    ),
    (
        IN_FLIGHT,
        "Events being delivered right now (holding a delivery permit).",
    ),
    (PARKED, "Events written to the parking lot, by reason."),
    (
        DLQ_WRITTEN,
        "Events written to the DLQ from the main path, by reason.",
    ),
    (
        DLQ_WRITE_FAILURES,
        "DLQ / parking-lot writes the broker did not acknowledge (retried).",
    ),
    (
        PRODUCE_REFUSED,
        "DLQ / parking-lot writes refused for good (too_large, not_authorized, unknown_topic, invalid_record), by topic and reason: never retried forever.",
    ),
    (
        ENVELOPE_REFERENCES,
        "DLQ / parking-lot envelopes written with a reference to the origin record instead of the payload (too large for the topic), by topic.",
    ),
    (
        COMMIT_WATERMARK,
        "Stored commit watermark (next offset) of each main partition.",
    ),
    (
        PARTITION_PAUSED,
        "1 while a main partition is not being read (FSM or in-flight limit).",
    ),
    (
        ACTOR_RESTARTS,
        "Actor restarts by the supervisor, by actor.",
    ),
    (
        ENRICH_CACHE,
        "Enrichment cache lookups, by result (hit or miss).",
    ),
    (ASSIGNED_PARTITIONS, "Partitions assigned to this instance."),
    (
        BREAKER_STATE,
        "Local circuit breaker: 0 closed, 1 half-open, 2 open.",
    ),
    (
        BREAKER_TRANSITIONS,
        "Circuit breaker transitions, by target state and reason.",
    ),
    (
        MARKER,
        "1 while the shared 'API down' marker exists in Redis.",
    ),
    (
        HEALTH_SOURCE,
        "1 for the source the health verdict rests on (redis or breaker).",
    ),
    (
        API_UNAVAILABLE,
        "1 while this instance judges the API unavailable (partitions paused).",
    ),
    (
        PARTITION_MODE,
        "1 for each partition's current mode (normal, paused, drain_dlq).",
    ),
    (
        MODE_TRANSITIONS,
        "Partition mode transitions, by target mode.",
    ),
    (
        DLQ_RETRIED,
        "DLQ events that failed again and were re-produced with dlq_retries + 1.",
    ),
    (
        DLQ_DROPPED,
        "DLQ events dropped to the parking lot, by reason (max_retries, expired, stale, ...).",
    ),
    (DLQ_REDELIVERED, "DLQ events delivered by the drain."),
    (
        RECONCILIATION,
        "Source-of-truth checks for deadline policies, by result.",
    ),
    (DLQ_LAG, "Unread records in each DLQ partition."),
    (
        CONSUMER_LAG,
        "Records of each main partition not yet finished (end offset minus watermark).",
    ),
    (
        MEMORY_ALLOCATED,
        "Heap bytes in live allocations (jemalloc `stats.allocated`), read at each scrape.",
    ),
    (
        MEMORY_RESIDENT,
        "Bytes of physically resident pages the allocator holds (jemalloc `stats.resident`); the rest of the RSS is code, stacks and librdkafka's buffers.",
    ),
    (
        MEMORY_ALLOCATIONS,
        "Heap allocations made since start (jemalloc `stats.arenas.<all>.{small,large}.nmalloc`), read at each scrape: divided by the events delivered over a window, the allocations per event (docs/BENCHMARKS.md).",
    ),
    (
        MEMORY_BUDGET,
        "Each byte budget's limit, by budget: buffered (polled, not yet begun: pipeline.max_buffered_bytes), in_flight (begun, not yet durable, DLQ records included: pipeline.max_in_flight_bytes), enrichment_cache (enrichment.cache_max_bytes).",
    ),
    (
        MEMORY_BUDGET_USED,
        "Bytes each budget holds now, by budget (see courier_memory_budget_bytes); in_flight may pass its limit by one event.",
    ),
    (
        BUFFERED_RECORDS,
        "Records polled and not yet begun by a partition (the fetch budget in records: pipeline.max_buffered).",
    ),
    (
        API_CONCURRENCY_LIMIT,
        "API calls allowed in flight now: the adaptive limit (api.adaptive_concurrency), or pipeline.concurrency when fixed.",
    ),
    (
        API_RATE_LIMIT,
        "The group-wide rate limit toward the API (api.rate_limit_per_sec), and this instance's share of it while Redis is unreachable, by scope (group, local_fallback).",
    ),
    (
        API_RATE_PERMITS,
        "Rate-limit permits asked for, by result (granted, denied) and source (redis, local_fallback).",
    ),
    (
        OFFSETS_SKIPPED,
        "Records completed without delivery after a rebalance or restart: the previous owner's commit metadata named them done (not redelivered).",
    ),
    (
        REVOKED_WORK,
        "Outcomes of work done for a partition after its handover completed (revoke drained, or its actor ended): requests made for a partition no longer owned. Expected 0.",
    ),
    (
        TAKEOVER,
        "Seconds from this consumer's subscribe (process start or consumer restart) to its first partition assignment: about a second for a restarted static member, up to session.timeout.ms while the group waits out a dead member.",
    ),
    (
        OFFSET_COMMITS,
        "OffsetCommit requests to the broker, by kind: auto (librdkafka's auto-commit, with something to commit) and explicit (Courier's: commits that follow progress, and metadata changed alone). The broker cost of keeping redelivery after a crash small.",
    ),
    (
        HEADER_NAMES_NOT_UTF8,
        "Record headers whose name is not UTF-8 (Kafka does not check names): the record is delivered; the name is kept as bytes in the record and its envelope, never forwarded to the API nor read as a CloudEvents attribute.",
    ),
    (
        POSITION_RESETS,
        "Read positions that moved back without Courier seeking (by topic and reason: topic_recreated, offset_reset): the partition started afresh at the new position, nothing dropped, the old position and metadata never committed onto the new log.",
    ),
    (
        POSITIONS_PASSED,
        "Times an idle partition's position was moved past offsets holding nothing to deliver (transaction markers, aborted records), checked by reading them: lag reaches 0 at idle.",
    ),
    (
        DLQ_REWINDS,
        "Times a DLQ partition was sought back to records read from it and handed back, not begun: DLQ records (most not due yet) hold at most half of pipeline.max_in_flight_bytes, so that main partitions are still read; those beyond it are read again once there is room. Steady increases mean the DLQ holds more than that half can: a long outage, or big records.",
    ),
    (
        AUTH_TOKEN_REQUESTS,
        "Requests to the OAuth2 token endpoint ([api.oauth2]), by outcome: ok, auth_token_unavailable (unreachable, 5xx, no usable answer), auth_token_refused (a 4xx: bad client credentials). About run time / token lifetime while tokens are cached.",
    ),
    (
        AUTH_TOKEN_EXPIRY,
        "When the cached OAuth2 access token expires (Unix seconds); 0 before the first token.",
    ),
    (
        AUTH_RETRIES,
        "Requests sent again once after a 401 with a refreshed credential (a new OAuth2 token, or a rotated api.token_file), not counted as a try of the event; by outcome of the retry (delivered, refused).",
    ),
    (
        SECRET_RELOADS,
        "Times a secret file (api.token_file, api.oauth2.client_secret_file, api.signing.secret_file) was seen changed and its new value taken, by field.",
    ),
    (
        BATCH_REQUESTS,
        "Requests sent by batch delivery ([api.batch] with max_events > 1), a batch of one included.",
    ),
    (
        BATCH_EVENTS,
        "Events per request sent by batch delivery (histogram).",
    ),
    (
        BATCH_SPLIT_REQUESTS,
        "Extra requests made by splitting batches refused as a whole (api.batch.split statuses) into halves: at most 2*ceil(log2 n) per bad event in a batch of n.",
    ),
    (
        BATCH_SHRUNK,
        "Times a 413 to a batch held its route's batches to half the refused size for a minute.",
    ),
    (
        BATCH_RESULTS_UNREADABLE,
        "2xx batch answers whose per-item results (api.batch.results) could not be read, by reason (read_failed, too_large, not_json, no_results_array): every event of the batch is sent again.",
    ),
    (
        BATCH_SPLIT_SINGLES_RATIO,
        "Over the last 10 s window of a batched route (by route), the share of answered events that were answered alone after their batch was refused as a whole and split (above 0.5: the endpoint may take single events only).",
    ),
    (
        ORDERED_RESENT,
        "Events of an ordered run (ordered = true) sent again, although answered, because an earlier event of the run is tried again: duplicates the API drops by event id.",
    ),
    (
        BATCH_RESENT,
        "Events a 2xx batch answer left without a result while it accepted others of the request (api.batch.results), sent again at once in the route's next batch without spending a try (at most 4 times per try).",
    ),
    (
        DIVERTED,
        "Events written to the DLQ without a try, by destination and reason: destination_unavailable (their destination, the API a route sends to, was down longer than degraded.destination_hold, or held half of pipeline.max_in_flight_per_partition, while the partition went on with other destinations) or key_in_dlq (with several destinations: an earlier event of the key to that destination is in the DLQ, and order per key holds). Redelivered by the DLQ drain once every destination is back.",
    ),
    (
        HELD_OUT,
        "Events of a destination that is down held in a partition (by partition and destination), not sent, while the partition goes on with its other destinations: sent when the destination is back, or diverted to the DLQ after degraded.destination_hold.",
    ),
    (
        DELETED_UNREAD,
        "Events deleted (retention, delete-records, truncation) before this group read them, by topic and partition: the offsets between the committed position and the log start, less those the commit metadata names done (a recreated topic: the old log's records past Courier's position at its last lag check, a lower bound). Each is an event lost. Expected 0.",
    ),
];
