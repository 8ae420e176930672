//! Admin and inspection helpers of the service, the demo and the operator
//! commands: create a topic Courier owns, read topic settings, end offsets and
//! committed offsets, and stream a whole topic (e.g. the DLQ or the parking
//! lot) as it stands now. What only tests, benches and drills need (create test
//! topics, alter configs, delete records, add partitions, read a topic into
//! memory) is in courier-standins' `admin`.
//!
//! Each helper takes a [`Connection`]: a broker list (plaintext, `bootstrap.servers`
//! only: the tests, the drills, the demo) or the whole [`KafkaConfig`] (TLS and
//! SASL from `[kafka.properties]`, the SASL password from the environment: the
//! operator commands).
//!
//! # Parts
//!
//! * `mod.rs` — [`AdminError`] and [`Connection`] (what a helper connects with).
//! * `reader.rs` — the readers' consumer, whose context remembers an
//!   authentication failure so an error can say why.
//! * `topics.rs` — topics: [`ensure_topic`], their configs ([`topic_setting`],
//!   [`topic_settings`]), and the controller detour.
//! * `offsets.rs` — where partitions stand: [`end_offsets`], [`watermarks`],
//!   [`snapshot`], [`committed_offsets`] and [`committed_positions`].
//! * `read.rs` — records read back: [`scan`], [`fetch_one`].

mod offsets;
mod read;
mod reader;
mod topics;

pub use offsets::{
    committed_offsets, committed_positions, end_offsets, snapshot, watermarks, CommittedPosition,
};
pub use read::scan;
pub(crate) use read::{fetch_one, ReadRecord};
pub(crate) use topics::controller_detour;
pub use topics::topic_setting;
pub(crate) use topics::{ensure_topic, topic_settings};

use crate::config::KafkaConfig;
use rdkafka::config::ClientConfig;
use rdkafka::error::KafkaError;

#[derive(Debug, thiserror::Error)]
pub enum AdminError {
    #[error("kafka: {0}")]
    Kafka(#[from] KafkaError),
    #[error("kafka: authentication failed ({0}); check sasl.username, sasl.mechanisms and the password in the variable kafka.sasl_password_env names")]
    Auth(String),
    #[error("creating topic {0}: {1}")]
    Create(String, String),
    #[error("timed out: {0}")]
    Timeout(String),
}

/// Where the helpers connect, and how: the librdkafka configuration every client
/// they create starts from.
pub trait Connection {
    fn client_config(&self) -> ClientConfig;
}

/// A broker list: `bootstrap.servers` only (plaintext listeners: tests, drills, demo).
impl Connection for str {
    fn client_config(&self) -> ClientConfig {
        let mut c = ClientConfig::new();
        c.set("bootstrap.servers", self);
        c
    }
}

/// A broker list, as for `str`.
impl Connection for String {
    fn client_config(&self) -> ClientConfig {
        self.as_str().client_config()
    }
}

/// The whole Kafka config, as the pipeline's own clients use it
/// ([`crate::kafka::client_base`]): `[kafka.properties]` and the SASL password
/// from the environment.
impl Connection for KafkaConfig {
    fn client_config(&self) -> ClientConfig {
        crate::kafka::client_base(self)
    }
}

/// A ready-made configuration, used as it is.
impl Connection for ClientConfig {
    fn client_config(&self) -> ClientConfig {
        self.clone()
    }
}
