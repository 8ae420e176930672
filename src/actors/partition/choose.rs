//! An event's fate by expression, decided as it is decoded: the filters
//! (`[[filters]]`: dropped, or kept) and its route (`[[api.routes]]`: the
//! first whose type and `when` match). The expressions are evaluated by
//! `core::expr` against one [`Scope`] per event: its variables are built
//! once, whatever the number of expressions, and only when one is
//! evaluated. Without filters and without `when`, no scope is made (no cost
//! but today's glob match).

use crate::core::event::Event;
use crate::core::expr::{FilterVerdict, Filters, Needs, Scope};
use crate::core::input::{BodyType, Header};
use crate::core::mapping::{RouteIndex, Routes, Target};
use crate::metrics as m;
use crate::runtime::Pipeline;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

/// One dry-run line per filter for the first event it would drop, then one
/// for every this many.
const DRY_RUN_LOG_EVERY: u64 = 1000;

/// What the expressions decided for an event.
pub(super) enum Decision {
    /// Deliver it there.
    Deliver(Target),
    /// Dropped by this filter.
    Filtered(Arc<str>),
    /// An expression gave no answer: parked `expression_failed` with this
    /// message.
    Park(String),
}

/// The record's part of an event's variables.
pub(super) struct Record<'a> {
    /// The key ordering uses.
    pub(super) key: Option<&'a [u8]>,
    pub(super) record_key: Option<&'a [u8]>,
    pub(super) headers: &'a [Header],
    pub(super) topic: &'a str,
    pub(super) partition: i32,
    pub(super) offset: i64,
}

/// Per filter: its name, and its counters.
struct FilterMeters {
    name: Arc<str>,
    filtered: metrics::Counter,
    would_drop: metrics::Counter,
    /// Events it would have dropped (dry run), for the log's sample.
    seen: AtomicU64,
    /// Events it failed for (dry run), for the log's sample.
    failed: AtomicU64,
}

/// The routes and filters of the pipeline, and what their expressions need.
pub(super) struct Chooser {
    routes: Routes,
    filters: Arc<Filters>,
    needs: Needs,
    /// Whether any expression is configured.
    any: bool,
    meters: Vec<FilterMeters>,
}

impl Chooser {
    pub(super) fn new(pipeline: &Pipeline) -> Chooser {
        let routes = pipeline.routes.clone();
        let filters = pipeline.filters.clone();
        let meters = filters
            .iter()
            .map(|f| FilterMeters {
                name: Arc::from(f.name.as_str()),
                filtered: metrics::counter!(m::FILTERED, "filter" => f.name.clone()),
                would_drop: metrics::counter!(m::FILTER_WOULD_DROP, "filter" => f.name.clone()),
                seen: AtomicU64::new(0),
                failed: AtomicU64::new(0),
            })
            .collect();
        Chooser {
            needs: filters.needs().union(routes.needs()),
            any: !filters.is_empty() || routes.any_when(),
            routes,
            filters,
            meters,
        }
    }

    pub(super) fn routes(&self) -> &Routes {
        &self.routes
    }

    /// A chosen route and its destination.
    pub(super) fn target(&self, route: Option<RouteIndex>) -> Target {
        Target {
            route,
            destination: self.routes.destination_of(route),
        }
    }

    /// The route by type alone, passing over routes with a `when` (an event
    /// that cannot be read: a DLQ payload that no longer decodes).
    pub(super) fn by_type(&self, event_type: &str) -> Target {
        self.target(self.routes.choose(event_type, None).unwrap_or_default())
    }

    /// The filters' verdict and the route of a main-topic event.
    pub(super) fn decide(&self, ev: &Event, body: BodyType, r: Record<'_>) -> Decision {
        if !self.any {
            return Decision::Deliver(self.by_type(&ev.event_type));
        }
        let mut scope = self.scope(ev, body, &r);
        if !self.filters.is_empty() {
            match self.filters.verdict(&mut scope) {
                Ok(FilterVerdict::Keep {
                    would_drop,
                    would_park,
                }) => self.dry_runs(&would_drop, &would_park, ev, &r),
                Ok(FilterVerdict::Drop {
                    filter,
                    would_drop,
                    would_park,
                }) => {
                    self.dry_runs(&would_drop, &would_park, ev, &r);
                    let Some(meter) = self.meters.get(filter) else {
                        return Decision::Park(format!("filter #{filter} is not configured"));
                    };
                    meter.filtered.increment(1);
                    tracing::debug!(filter = %meter.name, id = %ev.id, partition = r.partition, offset = r.offset, "filtered");
                    return Decision::Filtered(meter.name.clone());
                }
                Err(e) => return Decision::Park(e.to_string()),
            }
        }
        match self.routes.choose(&ev.event_type, Some(&mut scope)) {
            Ok(route) => Decision::Deliver(self.target(route)),
            Err(e) => Decision::Park(e.to_string()),
        }
    }

    /// The route of a DLQ event whose recorded route is gone (or was never
    /// recorded): chosen again, filters aside (it passed them once).
    pub(super) fn route_again(
        &self,
        ev: &Event,
        body: BodyType,
        r: Record<'_>,
    ) -> Result<Target, String> {
        let mut scope = self.scope(ev, body, &r);
        self.routes
            .choose(&ev.event_type, Some(&mut scope))
            .map(|route| self.target(route))
            .map_err(|e| e.to_string())
    }

    fn scope<'a>(&self, ev: &'a Event, body: BodyType, r: &Record<'a>) -> Scope<'a> {
        let facts = crate::core::expr::Facts::of(ev, body).with_record(
            r.key,
            r.record_key,
            r.headers,
            r.topic,
            r.partition,
            r.offset,
        );
        Scope::new(facts, self.needs)
    }

    /// Counts what dry-run filters would have dropped, and logs a sample;
    /// logs a sample of the events they failed for (which they would have
    /// parked).
    fn dry_runs(&self, would_drop: &[usize], would_park: &[usize], ev: &Event, r: &Record<'_>) {
        for meter in would_park.iter().filter_map(|&i| self.meters.get(i)) {
            let n = meter.failed.fetch_add(1, Ordering::Relaxed);
            if n % DRY_RUN_LOG_EVERY == 0 {
                tracing::warn!(
                    filter = %meter.name,
                    id = %crate::core::text::excerpt(&ev.id, 128),
                    partition = r.partition,
                    offset = r.offset,
                    failed = n + 1,
                    "dry-run filter fails for this event: without dry_run it would be parked expression_failed (one line per {DRY_RUN_LOG_EVERY}; `courier expr eval` shows why)"
                );
            }
        }
        for meter in would_drop.iter().filter_map(|&i| self.meters.get(i)) {
            meter.would_drop.increment(1);
            let n = meter.seen.fetch_add(1, Ordering::Relaxed);
            if n % DRY_RUN_LOG_EVERY == 0 {
                tracing::info!(
                    filter = %meter.name,
                    id = %crate::core::text::excerpt(&ev.id, 128),
                    event_type = %crate::core::text::excerpt(&ev.event_type, 128),
                    partition = r.partition,
                    offset = r.offset,
                    would_have_dropped = n + 1,
                    "dry-run filter would drop this event (delivered all the same; one line per {DRY_RUN_LOG_EVERY})"
                );
            }
        }
    }
}
