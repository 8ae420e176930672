//! `[input.schema_registry]`: where `input.format = "avro"`, `"protobuf"` and
//! `"json_schema"` read writers' schemas (the Confluent Schema Registry API: `GET /schemas/ids/{id}`; also
//! Apicurio's `/apis/ccompat/v7`, Redpanda, Karapace).

use super::{invalid, is_loopback, ConfigError};
use serde::{Deserialize, Serialize};
use std::path::PathBuf;
use std::time::Duration;

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct SchemaRegistryConfig {
    /// The registry's base URL (`http://registry:8081`, or with a path such as
    /// `…/apis/ccompat/v7`); `/schemas/ids/{id}` is appended.
    pub url: String,
    /// Basic auth user; the password comes from the variable `password_env` names.
    pub username: Option<String>,
    /// The environment variable holding the basic-auth password.
    pub password_env: Option<String>,
    /// A bearer token from this environment variable (instead of basic auth).
    pub token_env: Option<String>,
    /// `[input.schema_registry.tls]`: TLS to an `https` registry.
    pub tls: RegistryTls,
    /// Bytes of parsed schemas kept, each charged for its compiled form: 4× its
    /// text (with its references') for Avro, 8× for Protobuf and JSON Schema; the
    /// least recently used go first. A schema is fetched again when it is needed
    /// after.
    pub cache_max_bytes: usize,
    /// One request's limit (connect, answer, body).
    #[serde(with = "humantime_serde")]
    pub request_timeout: Duration,
    /// How long an answer that parks records is kept (an id the registry does
    /// not know, a schema it serves that can never be read) before the
    /// registry is asked again for that id: one request per id per this
    /// period, however many records name it.
    #[serde(with = "humantime_serde")]
    pub negative_cache_ttl: Duration,
    /// Allow `http://` to a host other than loopback (the credentials, and the
    /// schemas that decide how every record is read, would cross the network
    /// in clear): `api.allow_plaintext`'s rule for the registry.
    pub allow_plaintext: bool,
}

#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct RegistryTls {
    /// PEM roots to trust for an `https` registry, added to the platform's.
    pub ca_file: Option<PathBuf>,
}

impl Default for SchemaRegistryConfig {
    fn default() -> Self {
        SchemaRegistryConfig {
            url: String::new(),
            username: None,
            password_env: None,
            token_env: None,
            tls: RegistryTls::default(),
            cache_max_bytes: 16 * 1024 * 1024,
            request_timeout: Duration::from_secs(10),
            negative_cache_ttl: Duration::from_secs(60),
            allow_plaintext: false,
        }
    }
}

/// How requests to the registry authenticate (secrets read from the environment).
#[derive(Clone, PartialEq, Eq)]
pub(crate) enum RegistryAuth {
    None,
    Basic { username: String, password: String },
    Bearer(String),
}

/// Never shows a secret.
impl std::fmt::Debug for RegistryAuth {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            RegistryAuth::None => write!(f, "None"),
            RegistryAuth::Basic { username, .. } => write!(f, "Basic({username}, ***)"),
            RegistryAuth::Bearer(_) => write!(f, "Bearer(***)"),
        }
    }
}

const FIELD: &str = "input.schema_registry";

fn env_secret(field: &str, name: &str) -> Result<String, ConfigError> {
    match std::env::var(name) {
        Ok(v) if !v.is_empty() => Ok(v),
        Ok(_) => Err(invalid(field, format!("the variable `{name}` is empty"))),
        Err(_) => Err(invalid(field, format!("the variable `{name}` is not set"))),
    }
}

impl SchemaRegistryConfig {
    /// Checks the section when a registry format is chosen (`format` names it).
    pub(crate) fn validate(&self, format: &str) -> Result<(), ConfigError> {
        if self.url.is_empty() {
            return Err(invalid(
                &format!("{FIELD}.url"),
                format!("input.format = \"{format}\" reads schemas from a registry: give its URL"),
            ));
        }
        let url = reqwest::Url::parse(&self.url)
            .map_err(|e| invalid(&format!("{FIELD}.url"), format!("`{}`: {e}", self.url)))?;
        if !matches!(url.scheme(), "http" | "https") {
            return Err(invalid(
                &format!("{FIELD}.url"),
                "must be http:// or https://",
            ));
        }
        if !url.username().is_empty() || url.password().is_some() {
            return Err(invalid(
                &format!("{FIELD}.url"),
                "must not carry credentials: use username + password_env or token_env",
            ));
        }
        if url.scheme() != "https" && !self.allow_plaintext && !is_loopback(&url) {
            return Err(invalid(
                &format!("{FIELD}.url"),
                format!(
                    "is plain http:// to {}, which is not loopback: the credentials and the \
                     schemas (which decide how every record is read) would cross the network \
                     in clear. Use https://, or set {FIELD}.allow_plaintext = true if the \
                     network is trusted",
                    url.host_str().unwrap_or("?")
                ),
            ));
        }
        if self.cache_max_bytes < 64 * 1024 {
            return Err(invalid(
                &format!("{FIELD}.cache_max_bytes"),
                "must be at least 65536 (one large schema)",
            ));
        }
        if self.request_timeout.is_zero() {
            return Err(invalid(
                &format!("{FIELD}.request_timeout"),
                "must be above 0",
            ));
        }
        if self.negative_cache_ttl < Duration::from_secs(1) {
            return Err(invalid(
                &format!("{FIELD}.negative_cache_ttl"),
                "must be at least 1s",
            ));
        }
        if let Some(ca) = &self.tls.ca_file {
            crate::tls::load_certs(&format!("{FIELD}.tls.ca_file"), ca)
                .map_err(|e| invalid(&format!("{FIELD}.tls.ca_file"), e.to_string()))?;
        }
        self.auth().map(|_| ())
    }

    /// The credentials, read from the environment.
    pub(crate) fn auth(&self) -> Result<RegistryAuth, ConfigError> {
        match (&self.username, &self.password_env, &self.token_env) {
            (None, None, None) => Ok(RegistryAuth::None),
            (Some(_), _, Some(_)) | (_, Some(_), Some(_)) => Err(invalid(
                &format!("{FIELD}.token_env"),
                "give either username + password_env (basic auth) or token_env (a bearer token), not both",
            )),
            (Some(u), Some(p), None) => {
                if u.is_empty() || u.contains(':') {
                    return Err(invalid(
                        &format!("{FIELD}.username"),
                        "must be non-empty and without `:`",
                    ));
                }
                Ok(RegistryAuth::Basic {
                    username: u.clone(),
                    password: env_secret(&format!("{FIELD}.password_env"), p)?,
                })
            }
            (Some(_), None, None) => Err(invalid(
                &format!("{FIELD}.password_env"),
                "username needs password_env (the variable holding the password)",
            )),
            (None, Some(_), None) => Err(invalid(
                &format!("{FIELD}.username"),
                "password_env needs a username",
            )),
            (None, None, Some(t)) => Ok(RegistryAuth::Bearer(env_secret(
                &format!("{FIELD}.token_env"),
                t,
            )?)),
        }
    }
}

#[cfg(test)]
mod tests {
    use crate::config::{Config, ConfigError};

    fn field_of(toml: &str) -> String {
        match Config::from_toml(toml) {
            Err(ConfigError::Invalid { field, .. }) => field,
            other => panic!("expected an invalid field, got {other:?}"),
        }
    }

    const AVRO: &str = "[input]\nformat = \"avro\"\nid = \"/id\"\n";

    #[test]
    fn avro_needs_a_registry_url() {
        assert_eq!(field_of(AVRO), "input.schema_registry.url");
        let c = Config::from_toml(&format!(
            "{AVRO}[input.schema_registry]\nurl = \"http://127.0.0.1:8081/apis/ccompat/v7\"\n"
        ))
        .unwrap();
        assert_eq!(c.input.schema_registry.cache_max_bytes, 16 << 20);
        assert_eq!(
            field_of(&format!(
                "{AVRO}[input.schema_registry]\nurl = \"ftp://x\"\n"
            )),
            "input.schema_registry.url"
        );
        assert_eq!(
            field_of(&format!(
                "{AVRO}[input.schema_registry]\nurl = \"http://u:p@x\"\n"
            )),
            "input.schema_registry.url"
        );
        assert_eq!(
            field_of(&format!(
                "{AVRO}[input.schema_registry]\nurl = \"https://x\"\ncache_max_bytes = 10\n"
            )),
            "input.schema_registry.cache_max_bytes"
        );
        assert_eq!(
            field_of(&format!(
                "{AVRO}[input.schema_registry]\nurl = \"https://x\"\n[input.schema_registry.tls]\nca_file = \"/nonexistent.pem\"\n"
            )),
            "input.schema_registry.tls.ca_file"
        );
    }

    #[test]
    fn credentials_from_one_source_only() {
        let base = format!("{AVRO}[input.schema_registry]\nurl = \"https://x\"\n");
        assert_eq!(
            field_of(&format!("{base}username = \"u\"\n")),
            "input.schema_registry.password_env"
        );
        assert_eq!(
            field_of(&format!("{base}password_env = \"P\"\n")),
            "input.schema_registry.username"
        );
        assert_eq!(
            field_of(&format!(
                "{base}username = \"u\"\npassword_env = \"P\"\ntoken_env = \"T\"\n"
            )),
            "input.schema_registry.token_env"
        );
        // A variable that is not set is named, its value never shown.
        let err = Config::from_toml(&format!(
            "{base}token_env = \"COURIER_TEST_SR_TOKEN_UNSET\"\n"
        ))
        .unwrap_err()
        .to_string();
        assert!(err.contains("COURIER_TEST_SR_TOKEN_UNSET"), "{err}");
        let auth = super::RegistryAuth::Basic {
            username: "u".into(),
            password: "hunter2".into(),
        };
        assert!(!format!("{auth:?}").contains("hunter2"));
    }

    #[test]
    fn other_formats_ignore_the_section() {
        assert!(Config::from_toml("[input]\nformat = \"json\"\n").is_ok());
    }

    #[test]
    fn protobuf_and_json_schema_read_through_the_registry_too() {
        for format in ["protobuf", "json_schema"] {
            let c = Config::from_toml(&format!(
                "[input]\nformat = \"{format}\"\n[input.schema_registry]\nurl = \"https://x\"\n"
            ))
            .unwrap();
            assert_eq!(c.input.format.name(), format);
            assert_eq!(
                field_of(&format!("[input]\nformat = \"{format}\"\n")),
                "input.schema_registry.url"
            );
        }
    }

    #[test]
    fn plain_http_only_to_loopback_unless_allowed() {
        let with = |url: &str, extra: &str| {
            format!("{AVRO}[input.schema_registry]\nurl = \"{url}\"\n{extra}")
        };
        for url in [
            "http://127.0.0.1:8081/apis/ccompat/v7",
            "http://localhost:8081",
            "http://[::1]:8081",
            "https://registry.example.com",
        ] {
            assert!(Config::from_toml(&with(url, "")).is_ok(), "{url}");
        }
        for url in ["http://registry.example.com:8081", "http://10.1.2.3:8081"] {
            assert_eq!(
                field_of(&with(url, "")),
                "input.schema_registry.url",
                "{url}"
            );
            assert!(
                Config::from_toml(&with(url, "allow_plaintext = true\n")).is_ok(),
                "{url} with allow_plaintext"
            );
        }
        assert_eq!(
            field_of(&with("http://127.0.0.1", "negative_cache_ttl = \"0s\"\n")),
            "input.schema_registry.negative_cache_ttl"
        );
        // With credentials too: refused the same way.
        std::env::set_var("COURIER_TEST_SR_PLAIN_PW", "pw");
        assert_eq!(
            field_of(&with(
                "http://registry.example.com",
                "username = \"u\"\npassword_env = \"COURIER_TEST_SR_PLAIN_PW\"\n"
            )),
            "input.schema_registry.url"
        );
    }
}
