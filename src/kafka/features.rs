//! What this build's librdkafka was built with, and what a deployment needs of
//! it: a unit test of the build (the module is compiled for tests only).

use rdkafka::config::ClientConfig;
use rdkafka::error::KafkaResult;

/// What this build's librdkafka can do (`builtin.features`: codecs, TLS, SASL
/// mechanisms, `http`/`oidc` for OAUTHBEARER token fetching).
fn builtin_features() -> KafkaResult<Vec<String>> {
    let features = ClientConfig::new()
        .create_native_config()?
        .get("builtin.features")?;
    Ok(features.split(',').map(str::to_string).collect())
}

/// What a deployment may need of librdkafka: every codec a producer may have
/// written with, TLS, the SASL mechanisms Courier documents, OIDC.
const REQUIRED_FEATURES: [&str; 10] = [
    "gzip",
    "snappy",
    "lz4",
    "zstd",
    "ssl",
    "sasl_plain",
    "sasl_scram",
    "sasl_oauthbearer",
    "http",
    "oidc",
];

#[cfg(test)]
mod tests {
    use super::*;

    /// Without `zstd`, a topic written with zstd (the default of many producers)
    /// delivers nothing; without `oidc`, OAUTHBEARER cannot fetch its token.
    #[test]
    fn librdkafka_is_built_with_every_codec_and_mechanism() {
        let have = builtin_features().unwrap();
        let missing: Vec<_> = REQUIRED_FEATURES
            .iter()
            .filter(|f| !have.iter().any(|h| h == *f))
            .collect();
        assert!(
            missing.is_empty(),
            "missing {missing:?}; built with {have:?}"
        );
    }
}
