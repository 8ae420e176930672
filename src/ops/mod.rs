//! Operator tools: `courier dlq inspect` and `courier dlq replay`; `courier expr
//! eval` (`expr_eval`: a configuration's expressions against one event, offline). The summaries and
//! filters are pure (tested without a broker); reading and writing topics goes
//! through `crate::kafka::admin` and an idempotent producer.
//!
//! # Reaching Kafka
//!
//! The operator commands (`courier dlq inspect|replay`) reach Kafka with the same settings
//! as the pipeline: their readers and admin client start from `kafka::client_base`
//! (`bootstrap.servers`, `[kafka.properties]`, the secrets from the environment),
//! their producer is `kafka::producer_config`. The helpers in `kafka::admin` take a
//! `Connection`: that `KafkaConfig`, or a bare broker list for the tests, the drills and the
//! demo on plaintext listeners. An authentication failure librdkafka reports is named in
//! the helpers' error (`AdminError::Auth`) instead of a bare metadata timeout.

pub mod expr_eval;
pub mod inspect;
pub mod progress;
pub mod replay;
