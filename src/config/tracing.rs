//! `[tracing]`: optional OTLP export of Courier's delivery spans.

use super::{invalid, ConfigError};
use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct TracingConfig {
    /// OTLP/HTTP traces endpoint (e.g. `http://127.0.0.1:4318/v1/traces`).
    /// Unset: no export, and no span work per event.
    pub otlp_endpoint: Option<String>,
    /// Share (0-1] of new traces kept; an event's trace context decides for its
    /// own trace (parent-based).
    pub sample_ratio: f64,
    /// `service.name` of the exported spans.
    pub service_name: String,
}

impl Default for TracingConfig {
    fn default() -> Self {
        TracingConfig {
            otlp_endpoint: None,
            sample_ratio: 1.0,
            service_name: "courier".into(),
        }
    }
}

impl TracingConfig {
    pub(crate) fn validate(&self) -> Result<(), ConfigError> {
        if let Some(e) = &self.otlp_endpoint {
            let url = reqwest::Url::parse(e)
                .map_err(|err| invalid("tracing.otlp_endpoint", err.to_string()))?;
            if !matches!(url.scheme(), "http" | "https") {
                return Err(invalid(
                    "tracing.otlp_endpoint",
                    "scheme must be http or https (OTLP over HTTP)",
                ));
            }
            if !url.username().is_empty() || url.password().is_some() {
                return Err(invalid(
                    "tracing.otlp_endpoint",
                    "must not carry credentials",
                ));
            }
        }
        if !(self.sample_ratio > 0.0 && self.sample_ratio <= 1.0) {
            return Err(invalid(
                "tracing.sample_ratio",
                "must be above 0 and at most 1",
            ));
        }
        if self.service_name.is_empty() {
            return Err(invalid("tracing.service_name", "must not be empty"));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use crate::config::{Config, ConfigError};

    #[test]
    fn otlp_settings_are_checked() {
        let ok = Config::from_toml(
            "[tracing]\notlp_endpoint = \"http://127.0.0.1:4318/v1/traces\"\nsample_ratio = 0.5",
        )
        .expect("valid");
        assert_eq!(ok.tracing.sample_ratio, 0.5);
        assert!(
            Config::default().tracing.otlp_endpoint.is_none(),
            "off by default"
        );
        for (toml, field) in [
            (
                "[tracing]\notlp_endpoint = \"grpc://x:4317\"",
                "tracing.otlp_endpoint",
            ),
            (
                "[tracing]\notlp_endpoint = \"http://u:p@x/v1/traces\"",
                "tracing.otlp_endpoint",
            ),
            ("[tracing]\nsample_ratio = 0.0", "tracing.sample_ratio"),
            ("[tracing]\nsample_ratio = 1.5", "tracing.sample_ratio"),
            ("[tracing]\nservice_name = \"\"", "tracing.service_name"),
        ] {
            match Config::from_toml(toml) {
                Err(ConfigError::Invalid { field: f, .. }) => assert_eq!(f, field, "{toml}"),
                other => panic!("{toml}: expected {field} refused, got {other:?}"),
            }
        }
    }
}
