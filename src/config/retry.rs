//! `[retry]`: the DLQ retry policy per CloudEvents `type`, with a default.

use super::{invalid, ConfigError};
use crate::core::dlq_policy::DlqRetry;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct RetryConfig {
    pub default: DlqRetry,
    /// e.g. `[retry.types."order.paid"] kind = "deadline", deadline = "1h"`
    pub types: BTreeMap<String, DlqRetry>,
    /// Source of truth for `deadline` policies: a query with `$1` = the Kafka key
    /// that returns the entity's current version (one integer column), run against
    /// `enrichment.url`.
    pub source_query: String,
}

impl Default for RetryConfig {
    fn default() -> Self {
        RetryConfig {
            default: DlqRetry::Counter { max_retries: 5 },
            types: BTreeMap::new(),
            source_query: String::new(),
        }
    }
}

impl RetryConfig {
    pub(crate) fn policy_for(&self, event_type: Option<&str>) -> DlqRetry {
        event_type
            .and_then(|t| self.types.get(t))
            .copied()
            .unwrap_or(self.default)
    }

    /// Whether some policy needs the source-of-truth query.
    pub(crate) fn uses_deadline(&self) -> bool {
        std::iter::once(&self.default)
            .chain(self.types.values())
            .any(|p| matches!(p, DlqRetry::Deadline { .. }))
    }

    pub(crate) fn validate(&self) -> Result<(), ConfigError> {
        if self.uses_deadline() && !self.source_query.contains("$1") {
            return Err(invalid(
                "retry.source_query",
                "a `deadline` policy needs a source-of-truth query using `$1` for the key",
            ));
        }
        Ok(())
    }
}
