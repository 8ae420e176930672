//! What the actors and tasks share: configuration, the health verdict, the status
//! board, the byte budgets, the restart budget and the fatal signal. Not the actors
//! themselves: each one is given handles to the peers it talks to when it is
//! constructed (`crate::handle`).
//!
//! # Backpressure
//!
//! Mailboxes in ractor are unbounded, so limits are explicit, and all of them bound memory
//! that grows neither with the backlog nor with the number of assigned partitions: the
//! byte budgets are per process, and a record counts its value, key and headers plus
//! `kafka::RECORD_OVERHEAD` (2 KB: Courier's own state per event, measured in
//! docs/BENCHMARKS.md). Each budget's limit and use are gauges
//! (`courier_memory_budget_bytes{budget}`, `courier_memory_budget_used_bytes{budget}`).
//!
//! - **librdkafka's prefetch**: `queued.max.messages.kbytes` (4 MB) and
//!   `queued.min.messages` apply to the consumer's single queue (librdkafka 2.12 checks them
//!   against the forwarded queue, whatever the number of partitions); one fetch response can
//!   overshoot them by up to `max.partition.fetch.bytes` per partition, so `fetch.max.bytes`
//!   caps a response at 8 MB. These count a batch as the broker sends it, compressed: a
//!   zstd batch of 10 KB can hold 40 MB, decompressed whole into librdkafka's queue before
//!   any budget below sees a record. `receive.message.max.bytes` (`kafka::cap_decompression`)
//!   caps a zstd batch's decompression at 3 × `pipeline.max_buffered_bytes` (librdkafka
//!   triples its buffer per try from twice the compressed size, so every batch within the
//!   budget is read and none over three times it); a larger one is refused at every fetch
//!   and logged as an ERROR naming the remedy (its partition waits for a raised limit).
//!   lz4, gzip and snappy batches librdkafka decompresses whole whatever the setting: only
//!   the producer and the topic's `max.message.bytes` bound those. `tests/codecs.rs`: a 39 MB
//!   batch of 10 KB under a 4 MiB budget, peak RSS 51 MB against 44 MB idle (124 MB before).
//! - **The fetch budget** (`pipeline.max_buffered` records and `pipeline.max_buffered_bytes`,
//!   process-wide, `kafka::poller::Buffered`): records polled and not yet begun by a
//!   partition actor. Over either, the poll thread stops taking records from librdkafka (it
//!   keeps calling `poll` at least once a second, so group membership and rebalance
//!   callbacks are served); librdkafka's own queue then fills and its fetcher waits. It
//!   waits on a condition variable that the actors' take-ins signal once both counts are a
//!   quarter below their limits (`Buffered::wait_for_room`, woken by `Buffered::wake`): one
//!   wake-up per quarter of the budget drained, ≈ 10 a second at L = 50, C = 512, where a
//!   2 ms sleep loop woke it 440 times a second (BENCHMARKS run 17).
//! - **The in-flight budget** (`pipeline.max_in_flight_bytes`, process-wide,
//!   `core::byte_budget::ByteBudget`, shared by the partition machines): the bytes of the events
//!   begun and not yet durable, DLQ records waiting for the drain included. A machine
//!   begins a record only while the budget is not used up (`used < limit`); so the budget
//!   is passed by at most one record, and an event larger than the whole budget still goes
//!   (never a deadlock). A refused record waits in its side's backlog (still in the fetch
//!   budget); the machine asks for a *waker* (`Effect::AwaitBudget`), which the first
//!   give-back that leaves room calls once (the actor sends itself `Timer::Budget`); no
//!   polling. A machine that ends (revoke, crash) gives its share back when it is dropped.
//!   Before this budget, the events held grew with the partitions
//!   (`max_in_flight_per_partition` × partitions): 512 partitions held 100,000 events.
//!   With batching on and the two limits unset, the budget is 64 MiB and each partition
//!   may hold as many events as it holds at 2 KiB each (`PipelineConfig::batching_defaults`):
//!   then bytes, not a count, bound the events in delivery, and requests in flight hide
//!   the API's latency.
//! - **Per partition**: a partition actor begins at most `max_in_flight_per_partition`
//!   events (queued for a permit or in flight); records beyond that wait in its backlog,
//!   still counted in the fetch budget, and are begun as events finish. Backpressure
//!   therefore does *not* use librdkafka's pause, which drops the partition's prefetched
//!   records and restarts fetching only at the fetcher's next wake-up (up to ~1 s; the
//!   benchmark found the whole pipeline idle 0.3–0.4 s of every second that way). Only a
//!   partition whose backlog takes half the fetch budget, in records or in bytes (a stuck
//!   key, a stalled API), is paused in librdkafka, and resumed when the backlog is down to
//!   a quarter of it.
//! - **DLQ records** are begun as they arrive (the drain needs their `not_before`) but go
//!   out paced, so a partition holding `max_in_flight_per_partition` of them pauses DLQ p in
//!   librdkafka until it is down to half (the drain is rate-limited anyway; what was already
//!   polled still arrives, bounded by the fetch budget). DLQ records the in-flight budget
//!   keeps out wait in the DLQ backlog with DLQ p paused, and count as unread DLQ records
//!   for the FSM (main p waits behind them). They hold at most half of the in-flight
//!   budget (each partition one whatever the others hold): most are not due for a while,
//!   and held, they would keep main p from being read until they are. A DLQ record
//!   beyond that half is handed back with those behind it (out of the fetch budget at
//!   once), DLQ p sought back to it and paused until DLQ records hold a quarter of the
//!   budget (`core::partition::rewind`; `courier_dlq_rewinds_total`).
//! - **The enrichment cache** (`enrichment.cache_max_bytes`): a moka weigher counts each
//!   entry's key and JSON document as serialised (at least `cache_max_bytes /
//!   cache_capacity`, so `cache_capacity` still bounds the entries).
//! - **HTTP calls**: the pool's semaphore, kept at the adaptive concurrency limit (at most
//!   `pipeline.concurrency`; with batching the limit holds requests instead, and the pool
//!   stays at `pipeline.concurrency` events), and the group-wide rate limit (`core::concurrency`, `core::ratelimit`).
//!
//! The poll thread's batches are at most 512 records. Offsets are stored at most every
//! 10 ms per partition (one `store_offsets` per advance showed in the profile); a later
//! store only ever means re-reading a little more after a crash.

use crate::api_health::{ApiHealth, Destination};
pub use crate::clock::now_ms;
use crate::config::Config;
use crate::core::byte_budget::ByteBudget;
use crate::core::destination::DestinationId;
use crate::core::ratelimit::Assignment;
use crate::core::restart::{BudgetExhausted, RestartBudget};
use crate::kafka::poller::Buffered;
use crate::status_page::StatusBoard;
use std::sync::{Arc, Mutex};
use std::time::Instant;

pub struct Pipeline {
    pub config: Config,
    pub dlq_topic: String,
    pub parking_topic: String,
    /// Records handed from the poll thread to the actors and not yet taken in by a
    /// partition actor, and their bytes (see `kafka::CourierContext::buffered`).
    pub buffered: Arc<Buffered>,
    /// The in-flight byte budget (`pipeline.max_in_flight_bytes`), shared by the
    /// partition machines.
    pub in_flight: Arc<ByteBudget>,
    /// This instance's main partitions of the topic's: the consumer actor sets
    /// it, the rate limit's fallback reads it (its share without Redis).
    pub assignment: Arc<Assignment>,
    /// Identifies this instance in logs and in the Redis marker's value.
    pub instance: String,
    /// Each destination's name and health (`core::destination`), indexed by
    /// its `DestinationId`: the default one (`api.url`'s) first.
    pub destinations: Vec<Destination>,
    /// What `/status` shows; each actor publishes its own part.
    pub board: Arc<StatusBoard>,
    budget: Mutex<RestartBudget>,
    fatal: tokio::sync::watch::Sender<Option<String>>,
    /// Deleted-unread ranges reported so far (each lost offset counted once).
    deleted: Mutex<crate::core::deleted::Ledger>,
    /// The schema registry, when `input.format` reads through one.
    pub registry: Option<Arc<crate::schema_registry::SchemaRegistry>>,
    /// `[[api.routes]]` and `[[filters]]`, their expressions compiled once
    /// here (`core::expr`) and shared by every partition and destination.
    pub(crate) routes: crate::core::mapping::Routes,
    pub(crate) filters: Arc<crate::core::expr::Filters>,
}

impl Pipeline {
    /// `board` is the status board of this instance (its id is the instance's).
    /// Fails only where `Config::validate` would have: the routes and
    /// filters are compiled here, once.
    pub(crate) fn new(
        config: Config,
        board: Arc<StatusBoard>,
    ) -> Result<Pipeline, crate::config::ConfigError> {
        let routes = config.api.routes()?;
        let filters = Arc::new(config.filters()?);
        let budget = RestartBudget::new(config.supervision.max_restarts, config.supervision.window);
        let registry = config.input.format.uses_registry().then(|| {
            // A corrupted length inside an Avro record must not allocate more
            // than an event may hold (the crate's default is 512 MiB).
            apache_avro::util::max_allocation_bytes(
                config.pipeline.decode_options().max_event_bytes,
            );
            Arc::new(crate::schema_registry::SchemaRegistry::new(
                &config.input.schema_registry,
                config.input.format,
            ))
        });
        Ok(Pipeline {
            routes,
            filters,
            dlq_topic: config.kafka.dlq_topic(),
            parking_topic: config.kafka.parking_topic(),
            instance: board.instance().to_string(),
            board,
            destinations: config
                .api
                .destinations()
                .names()
                .iter()
                .map(|name| Destination {
                    name: name.clone(),
                    health: Arc::new(ApiHealth::new(&config.degraded)),
                })
                .collect(),
            buffered: Arc::new(Buffered::default()),
            in_flight: Arc::new(ByteBudget::new(config.pipeline.max_in_flight_bytes as u64)),
            assignment: Arc::default(),
            config,
            budget: Mutex::new(budget),
            fatal: tokio::sync::watch::Sender::new(None),
            deleted: Mutex::default(),
            registry,
        })
    }

    /// Destination `id` (the default one for an id the configuration does
    /// not have, which no route gives).
    pub(crate) fn destination(&self, id: DestinationId) -> &Destination {
        self.destinations
            .get(id.index())
            .unwrap_or(&self.destinations[0])
    }

    /// The health of destination `id` (see [`Pipeline::destination`]).
    pub(crate) fn health(&self, id: DestinationId) -> &Arc<ApiHealth> {
        &self.destination(id).health
    }

    /// Deleted-unread accounting, the one place it is logged and counted: the
    /// offsets of `topic`/`partition` between the committed position and the
    /// log start `log_start`, less those `done` (the commit metadata) names, not
    /// reported before in this process (`core::deleted::Ledger`). Logs an ERROR
    /// "events deleted unread" with topic, partition, from, to and count, and
    /// adds the count to `courier_events_deleted_unread_total{topic,partition}`.
    /// Returns the count (0: nothing new was lost). For an assignment, an
    /// offset reset, main, DLQ or parking topic alike.
    pub(crate) fn deleted_unread(
        &self,
        topic: &str,
        partition: i32,
        committed: i64,
        log_start: i64,
        done: Option<&crate::core::completed::Completed>,
    ) -> u64 {
        let gap = self
            .deleted
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .claim(topic, partition, committed, log_start, done);
        let Some(g) = gap else {
            return 0;
        };
        tracing::error!(
            topic,
            partition,
            from = g.from,
            to = g.to,
            count = g.count,
            "events deleted unread: the log now starts past offsets this group never read (retention, delete-records or truncation); they were neither delivered, dead-lettered nor parked"
        );
        metrics::counter!(
            crate::metrics::DELETED_UNREAD,
            "topic" => topic.to_string(),
            "partition" => partition.to_string()
        )
        .increment(g.count);
        g.count
    }

    /// The deleted-unread series of an assigned partition, at 0 until something
    /// is counted (dashboards and the alert see "nothing lost", not "no data").
    pub(crate) fn deleted_unread_series(&self, topic: &str, partition: i32) {
        metrics::counter!(
            crate::metrics::DELETED_UNREAD,
            "topic" => topic.to_string(),
            "partition" => partition.to_string()
        )
        .increment(0);
    }

    /// A new incarnation of `topic`/`partition`'s log (recreated, truncated to
    /// below what was reported): its losses are counted afresh.
    pub(crate) fn forget_deleted_unread(&self, topic: &str, partition: i32) {
        self.deleted
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .forget(topic, partition);
    }

    /// Counts one actor restart against the budget shared by the whole process.
    pub(crate) fn record_restart(&self, actor: &'static str) -> Result<(), BudgetExhausted> {
        metrics::counter!(crate::metrics::ACTOR_RESTARTS, "actor" => actor).increment(1);
        self.budget
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .record(Instant::now())
    }
}

impl Pipeline {
    /// Something the supervisor cannot repair: the process should end non-zero
    /// (the orchestrator restarts it). The first reason wins.
    pub(crate) fn fatal(&self, reason: String) {
        tracing::error!(%reason, "giving up");
        self.fatal.send_if_modified(|r| {
            if r.is_none() {
                *r = Some(reason);
                true
            } else {
                false
            }
        });
    }

    /// Resolves with the reason once [`Pipeline::fatal`] was called.
    pub(crate) async fn wait_fatal(&self) -> String {
        let mut rx = self.fatal.subscribe();
        loop {
            if let Some(r) = rx.borrow_and_update().clone() {
                return r;
            }
            if rx.changed().await.is_err() {
                return "pipeline dropped".into();
            }
        }
    }
}

/// A future whose panic is caught and returned (the future is not polled again).
struct CatchUnwind<F>(std::pin::Pin<Box<F>>);

impl<F: std::future::Future> std::future::Future for CatchUnwind<F> {
    type Output = Result<F::Output, String>;

    fn poll(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Self::Output> {
        let fut = self.0.as_mut();
        match std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| fut.poll(cx))) {
            Ok(std::task::Poll::Ready(v)) => std::task::Poll::Ready(Ok(v)),
            Ok(std::task::Poll::Pending) => std::task::Poll::Pending,
            Err(panic) => std::task::Poll::Ready(Err(crate::kafka::poller::panic_message(&*panic))),
        }
    }
}

/// Runs a task nothing else watches (a timer, the status listener, the
/// delivery dispatcher, a DLQ write): a panic in it declares the pipeline
/// fatal, so the process drains and exits non-zero instead of running on
/// without it (a tokio task's panic otherwise ends that task alone, silently).
/// Supervised actors are not wrapped: ractor catches their panics and the
/// supervisor restarts them within the restart budget.
pub(crate) async fn fatal_on_panic<F: std::future::Future>(
    pipeline: Arc<Pipeline>,
    what: &'static str,
    fut: F,
) -> Option<F::Output> {
    match CatchUnwind(Box::pin(fut)).await {
        Ok(v) => Some(v),
        Err(why) => {
            pipeline.fatal(format!("{what} panicked: {why}"));
            None
        }
    }
}

/// This process's instance id: `<HOSTNAME>-<pid>` (the pod name in Kubernetes).
pub(crate) fn instance_id() -> String {
    format!(
        "{}-{}",
        std::env::var("HOSTNAME").unwrap_or_else(|_| "courier".into()),
        std::process::id()
    )
}

impl Pipeline {
    /// Sets the byte-budget gauges (limits and use) of the fetch and in-flight
    /// budgets; the enrichment cache shows its own (`delivery::enrich`).
    pub(crate) fn show_budgets(&self) {
        use crate::metrics as m;
        let p = &self.config.pipeline;
        let (records, bytes) = self.buffered.get();
        metrics::gauge!(m::MEMORY_BUDGET, "budget" => "buffered").set(p.max_buffered_bytes as f64);
        metrics::gauge!(m::MEMORY_BUDGET_USED, "budget" => "buffered").set(bytes.max(0) as f64);
        metrics::gauge!(m::BUFFERED_RECORDS).set(records.max(0) as f64);
        metrics::gauge!(m::MEMORY_BUDGET, "budget" => "in_flight")
            .set(self.in_flight.limit() as f64);
        metrics::gauge!(m::MEMORY_BUDGET_USED, "budget" => "in_flight")
            .set(self.in_flight.used() as f64);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pipeline() -> Arc<Pipeline> {
        let config = Config::default();
        let status = Arc::new(StatusBoard::new(
            crate::status_page::BoardInfo::new(&config, "test".into()),
            now_ms(),
        ));
        Arc::new(Pipeline::new(config, status).expect("the default config is valid"))
    }

    /// An unwatched task's panic is the pipeline's fatal error (the process
    /// exits 70), not a task that silently stops; one that ends normally
    /// returns its value and declares nothing.
    #[tokio::test]
    async fn a_panicking_task_is_fatal() {
        let p = pipeline();
        let ok = tokio::spawn(fatal_on_panic(p.clone(), "the quiet task", async { 7 }));
        assert_eq!(ok.await.unwrap(), Some(7));
        let failing = tokio::spawn(fatal_on_panic(p.clone(), "the budget gauges", async {
            tokio::task::yield_now().await;
            panic!("boom")
        }));
        assert_eq!(failing.await.unwrap(), None::<()>);
        let reason = tokio::time::timeout(std::time::Duration::from_secs(5), p.wait_fatal())
            .await
            .expect("fatal declared");
        assert_eq!(reason, "the budget gauges panicked: boom");
    }
}
