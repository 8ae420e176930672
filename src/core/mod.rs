//! The pure core: no I/O, no clocks of its own. Everything here is decided from its
//! inputs and tested exhaustively; the actors only apply the decisions.

pub mod backoff;
pub mod breaker;
pub mod budget;
pub mod classify;
pub mod completed;
pub mod concurrency;
pub mod deleted;
pub mod dlq_policy;
pub mod envelope;
pub mod event;
pub mod fsm;
pub mod input;
pub mod liveness;
pub mod mapping;
pub mod offsets;
pub mod ordering;
pub mod pacer;
pub mod partition;
pub mod ratelimit;
pub mod restart;
pub mod status_page;
pub mod status_policy;
pub mod systemic;
pub mod text;
pub mod trace;
