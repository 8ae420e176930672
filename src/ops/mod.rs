//! Operator tools: `courier dlq inspect` and `courier dlq replay`. The summaries and
//! filters are pure (tested without a broker); reading and writing topics goes
//! through `crate::kafka::admin` and an idempotent producer.

pub mod inspect;
pub mod progress;
pub mod replay;
