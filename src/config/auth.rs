//! `[api.oauth2]` and `[api.signing]`, and the API's secrets: where each comes
//! from (an environment variable, or a file that is re-read when it changes),
//! and the checks `check-config` makes of them. Never a secret's value in the
//! config itself.

use super::{invalid, ConfigError};
use crate::core::webhook_signature;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// `[api.oauth2]`: an access token from the OAuth2 client credentials grant
/// (RFC 6749 §4.4), sent as `Authorization: Bearer`, cached and refreshed ahead
/// of its expiry.
///
/// A 401 from the API refreshes the token at most once per
/// `unauthorized_refresh_interval` (N, default 10 s, at least 1 s): after a
/// refresh a 401 caused, the next one waits N × (1 + u/2), `u` random in
/// [0, 1), whatever is delivered meanwhile; and a token younger than N that
/// other calls were answered 2xx with is not dropped by a 401 at all (one
/// route or tenant refusing every call says nothing about the token). A 401
/// whose `WWW-Authenticate` names `invalid_request` or `insufficient_scope`
/// never refreshes (RFC 6750 §3.1: not about the token). Over a minute, 401s
/// cause at most 60 s / N + 1 token requests per process.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct OAuth2Config {
    /// The token endpoint (https://, or http:// to loopback or with
    /// `api.allow_plaintext`).
    pub token_url: String,
    /// The client id of the grant.
    pub client_id: String,
    /// The environment variable holding the client secret, or …
    pub client_secret_env: Option<String>,
    /// … the file holding it (re-read when it changes).
    pub client_secret_file: Option<PathBuf>,
    /// Space-separated scopes (`scope` parameter); none when empty.
    pub scope: String,
    /// Sent as the `audience` parameter when set (Auth0, Okta and others).
    pub audience: Option<String>,
    /// How the client authenticates to the endpoint.
    pub auth_style: AuthStyle,
    /// Extra form parameters of the token request.
    pub params: BTreeMap<String, String>,
    /// CA certificates (PEM) for an https:// token endpoint, added to the
    /// platform's roots.
    pub ca_file: Option<PathBuf>,
    /// The shortest time between two token refreshes caused by 401s (N, see
    /// above; jittered up to 1.5 N). Default 10 s; at least 1 s.
    #[serde(with = "humantime_serde")]
    pub unauthorized_refresh_interval: Duration,
}

impl Default for OAuth2Config {
    fn default() -> Self {
        OAuth2Config {
            token_url: String::new(),
            client_id: String::new(),
            client_secret_env: None,
            client_secret_file: None,
            scope: String::new(),
            audience: None,
            auth_style: AuthStyle::default(),
            params: BTreeMap::new(),
            ca_file: None,
            unauthorized_refresh_interval: crate::core::credentials::unauthorized::DEFAULT_INTERVAL,
        }
    }
}

/// `api.oauth2.auth_style`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum AuthStyle {
    /// HTTP Basic with the client id and secret (`client_secret_basic`).
    #[default]
    Basic,
    /// `client_id` and `client_secret` in the form body (`client_secret_post`).
    Body,
}

/// `[api.signing]`: a signature over every request's body.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct SigningConfig {
    pub scheme: SigningScheme,
    /// The environment variable holding the secret(s), or …
    pub secret_env: Option<String>,
    /// … the file holding them (re-read when it changes). One or more `whsec_`
    /// secrets separated by whitespace: each request is signed with each.
    pub secret_file: Option<PathBuf>,
}

/// `api.signing.scheme`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub enum SigningScheme {
    /// Standard Webhooks: `webhook-id`, `webhook-timestamp`, `webhook-signature`.
    #[default]
    #[serde(rename = "standard-webhooks")]
    StandardWebhooks,
}

/// Where one secret comes from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum SecretSpec {
    /// An environment variable, read once at start.
    Env { field: &'static str, name: String },
    /// A file, re-read when it changes (a Kubernetes Secret volume).
    File { field: &'static str, path: PathBuf },
}

impl SecretSpec {
    /// The config field that names the source.
    pub(crate) fn field(&self) -> &'static str {
        match self {
            SecretSpec::Env { field, .. } | SecretSpec::File { field, .. } => field,
        }
    }

    /// The value now: the variable, or the file's content without the
    /// whitespace around it. Errors name the field and the source, never a value.
    pub(crate) fn read(&self) -> Result<String, ConfigError> {
        match self {
            SecretSpec::Env { field, name } => match std::env::var(name) {
                Ok(v) if !v.trim().is_empty() => Ok(v.trim().to_string()),
                _ => Err(invalid(
                    field,
                    format!("environment variable {name} is not set"),
                )),
            },
            SecretSpec::File { field, path } => read_secret_file(path)
                .map_err(|e| invalid(field, format!("{}: {e}", path.display()))),
        }
    }
}

/// The most a secret file may hold: a token, a key or a few signing secrets
/// are well under it; a file over it is the wrong file (or a device).
pub(super) const MAX_SECRET_FILE_BYTES: usize = 64 * 1024;

/// A secret file's content, trimmed (Kubernetes Secrets often end in a newline),
/// read up to [`MAX_SECRET_FILE_BYTES`] (a larger file is refused). A file that
/// every user may read is warned about, once per path (never its content).
pub(crate) fn read_secret_file(path: &Path) -> Result<String, String> {
    use std::io::Read;
    let file = std::fs::File::open(path).map_err(|e| e.to_string())?;
    if let Ok(meta) = file.metadata() {
        if world_readable(&meta) {
            warn_world_readable(path);
        }
    }
    let mut bytes = Vec::new();
    file.take(MAX_SECRET_FILE_BYTES as u64 + 1)
        .read_to_end(&mut bytes)
        .map_err(|e| e.to_string())?;
    if bytes.len() > MAX_SECRET_FILE_BYTES {
        return Err(format!(
            "is larger than {} KiB: a secret file holds one secret (a token, a key), \
             not more — is this the right file?",
            MAX_SECRET_FILE_BYTES / 1024
        ));
    }
    let text = String::from_utf8(bytes).map_err(|_| "is not UTF-8 text".to_string())?;
    match text.trim() {
        "" => Err("is empty".into()),
        t => Ok(t.to_string()),
    }
}

/// Whether every user of the machine may read the file (mode `o+r`).
fn world_readable(meta: &std::fs::Metadata) -> bool {
    use std::os::unix::fs::PermissionsExt;
    meta.permissions().mode() & 0o004 != 0
}

/// Warns once per path that a secret file is world-readable.
fn warn_world_readable(path: &Path) {
    static WARNED: std::sync::Mutex<std::collections::BTreeSet<PathBuf>> =
        std::sync::Mutex::new(std::collections::BTreeSet::new());
    let first = WARNED
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
        .insert(path.to_path_buf());
    if first {
        tracing::warn!(
            path = %path.display(),
            "a secret file is readable by every user of the machine: restrict it \
             (chmod 0400, or a Kubernetes Secret volume's defaultMode 0400)"
        );
    }
}

/// One of `env` / `file`, not both.
fn one_of(
    env_field: &'static str,
    env: &Option<String>,
    file_field: &'static str,
    file: &Option<PathBuf>,
) -> Result<Option<SecretSpec>, ConfigError> {
    match (env, file) {
        (Some(_), Some(_)) => Err(invalid(
            file_field,
            format!("and {env_field} are both set: name one source of the secret"),
        )),
        (Some(name), None) if name.is_empty() => {
            Err(invalid(env_field, "must name an environment variable"))
        }
        (Some(name), None) => Ok(Some(SecretSpec::Env {
            field: env_field,
            name: name.clone(),
        })),
        (None, Some(path)) if path.as_os_str().is_empty() => {
            Err(invalid(file_field, "must name a file"))
        }
        (None, Some(path)) => Ok(Some(SecretSpec::File {
            field: file_field,
            path: path.clone(),
        })),
        (None, None) => Ok(None),
    }
}

impl super::ApiConfig {
    /// The static bearer token's source (`api.token_env` or `api.token_file`).
    pub(crate) fn token_spec(&self) -> Result<Option<SecretSpec>, ConfigError> {
        one_of(
            "api.token_env",
            &self.token_env,
            "api.token_file",
            &self.token_file,
        )
    }

    /// Checks `[api.oauth2]` and `[api.signing]` and how they combine with the
    /// static token (no I/O).
    pub(crate) fn validate_auth(&self) -> Result<(), ConfigError> {
        let token = self.token_spec()?;
        if let Some(o) = &self.oauth2 {
            if let Some(t) = &token {
                return Err(invalid(
                    t.field(),
                    "and [api.oauth2] are both set: the bearer token comes from one of them",
                ));
            }
            o.validate(self)?;
        }
        if let Some(s) = &self.signing {
            s.spec()?.ok_or_else(|| {
                invalid(
                    "api.signing.secret_env",
                    "or api.signing.secret_file must name the signing secret",
                )
            })?;
        }
        Ok(())
    }

    /// Reads every secret of the API's authentication and checks it: present,
    /// and for signing well-formed (`check-config` and `run`).
    pub(crate) fn check_auth_secrets(&self) -> Result<(), ConfigError> {
        if let Some(t) = self.token_spec()? {
            let v = t.read()?;
            if reqwest::header::HeaderValue::from_str(&format!("Bearer {v}")).is_err() {
                return Err(invalid(
                    t.field(),
                    "holds characters an HTTP header cannot carry",
                ));
            }
        }
        if let Some(o) = &self.oauth2 {
            if let Some(s) = o.secret_spec()? {
                s.read()?;
            }
        }
        if let Some(s) = &self.signing {
            if let Some(spec) = s.spec()? {
                let v = spec.read()?;
                webhook_signature::parse_secrets(&v).map_err(|e| {
                    invalid(
                        spec.field(),
                        format!("is not a Standard Webhooks secret: {e}"),
                    )
                })?;
            }
        }
        Ok(())
    }
}

impl super::ApiConfig {
    /// What requests carry to authenticate, for `check-config` (sources and
    /// the token URL, never a value).
    pub fn auth_summary(&self) -> String {
        let source = |s: &SecretSpec| match s {
            SecretSpec::Env { field, name } => format!("{field} (${name})"),
            SecretSpec::File { field, path } => format!("{field} ({})", path.display()),
        };
        let mut out = if let Some(o) = &self.oauth2 {
            format!(
                "OAuth2 client credentials from {} as client {:?}, secret from {}",
                o.token_url,
                o.client_id,
                o.secret_spec()
                    .ok()
                    .flatten()
                    .map_or_else(|| "nowhere".into(), |s| source(&s))
            )
        } else {
            match self.token_spec().ok().flatten() {
                Some(s) => format!("bearer token from {}", source(&s)),
                None => "no bearer token".into(),
            }
        };
        if let Some(s) = self.signing.as_ref().and_then(|s| s.spec().ok().flatten()) {
            out.push_str(&format!(
                "; signed (standard-webhooks) with the secrets of {}",
                source(&s)
            ));
        }
        out
    }
}

impl OAuth2Config {
    /// The client secret's source; `None`: a public client (no secret).
    pub(crate) fn secret_spec(&self) -> Result<Option<SecretSpec>, ConfigError> {
        one_of(
            "api.oauth2.client_secret_env",
            &self.client_secret_env,
            "api.oauth2.client_secret_file",
            &self.client_secret_file,
        )
    }

    fn validate(&self, api: &super::ApiConfig) -> Result<(), ConfigError> {
        let field = "api.oauth2.token_url";
        if self.token_url.is_empty() {
            return Err(invalid(field, "must name the token endpoint"));
        }
        let url =
            reqwest::Url::parse(&self.token_url).map_err(|e| invalid(field, e.to_string()))?;
        if !matches!(url.scheme(), "http" | "https") {
            return Err(invalid(field, "scheme must be http or https"));
        }
        if !url.username().is_empty() || url.password().is_some() {
            return Err(invalid(
                field,
                "must not carry credentials: use api.oauth2.client_id and client_secret_env or client_secret_file",
            ));
        }
        if url.scheme() != "https" && !api.allow_plaintext && !super::api::is_loopback(&url) {
            return Err(invalid(
                field,
                format!(
                    "is plain http:// to {}, which is not loopback: the client secret and the \
                     tokens would cross the network in clear. Use https://, or set \
                     api.allow_plaintext = true if the network is trusted",
                    url.host_str().unwrap_or("?")
                ),
            ));
        }
        if self.client_id.is_empty() {
            return Err(invalid("api.oauth2.client_id", "must be set"));
        }
        if self.unauthorized_refresh_interval < Duration::from_secs(1) {
            return Err(invalid(
                "api.oauth2.unauthorized_refresh_interval",
                "must be at least 1s: it bounds the token requests an API answering 401 causes",
            ));
        }
        let spec = self.secret_spec()?;
        if spec.is_none() {
            return Err(invalid(
                "api.oauth2.client_secret_env",
                "or api.oauth2.client_secret_file must name the client secret",
            ));
        }
        for name in self.params.keys() {
            let reserved = [
                "grant_type",
                "client_id",
                "client_secret",
                "scope",
                "audience",
            ];
            if reserved.contains(&name.as_str()) {
                return Err(invalid(
                    &format!("api.oauth2.params.{name}"),
                    "is set by Courier (use the api.oauth2 field of that name)",
                ));
            }
        }
        if let Some(ca) = &self.ca_file {
            if url.scheme() != "https" {
                return Err(invalid(
                    "api.oauth2.ca_file",
                    "is set but api.oauth2.token_url is http://",
                ));
            }
            if ca.as_os_str().is_empty() {
                return Err(invalid("api.oauth2.ca_file", "must name a file"));
            }
        }
        Ok(())
    }
}

impl SigningConfig {
    /// The signing secret's source.
    pub(crate) fn spec(&self) -> Result<Option<SecretSpec>, ConfigError> {
        one_of(
            "api.signing.secret_env",
            &self.secret_env,
            "api.signing.secret_file",
            &self.secret_file,
        )
    }
}

#[cfg(test)]
mod tests {
    use super::super::ApiConfig;
    use super::*;

    fn field(r: Result<(), ConfigError>) -> String {
        match r {
            Err(ConfigError::Invalid { field, .. }) => field,
            other => panic!("expected an invalid field, got {other:?}"),
        }
    }

    fn oauth2(url: &str) -> OAuth2Config {
        OAuth2Config {
            token_url: url.into(),
            client_id: "courier".into(),
            client_secret_env: Some("COURIER_TEST_OAUTH2_SECRET".into()),
            ..OAuth2Config::default()
        }
    }

    #[test]
    fn a_plain_http_token_url_to_another_host_is_refused() {
        let mut c = ApiConfig {
            oauth2: Some(oauth2("http://idp.example.com/oauth2/token")),
            ..ApiConfig::default()
        };
        assert_eq!(field(c.validate_auth()), "api.oauth2.token_url");
        c.oauth2 = Some(oauth2("http://127.0.0.1:4444/oauth2/token"));
        assert!(c.validate_auth().is_ok());
        c.oauth2 = Some(oauth2("https://idp.example.com/oauth2/token"));
        assert!(c.validate_auth().is_ok());
        c.allow_plaintext = true;
        c.oauth2 = Some(oauth2("http://idp.example.com/oauth2/token"));
        assert!(c.validate_auth().is_ok());
    }

    #[test]
    fn one_source_per_secret_and_one_bearer() {
        let mut c = ApiConfig {
            token_env: Some("T".into()),
            token_file: Some("/run/t".into()),
            ..ApiConfig::default()
        };
        assert_eq!(field(c.validate_auth()), "api.token_file");
        c.token_file = None;
        c.oauth2 = Some(oauth2("https://idp/token"));
        assert_eq!(field(c.validate_auth()), "api.token_env");
        c.token_env = None;
        let mut o = oauth2("https://idp/token");
        o.client_secret_env = None;
        c.oauth2 = Some(o.clone());
        assert_eq!(field(c.validate_auth()), "api.oauth2.client_secret_env");
        o.client_secret_file = Some("/run/s".into());
        o.params.insert("client_secret".into(), "x".into());
        c.oauth2 = Some(o);
        assert_eq!(field(c.validate_auth()), "api.oauth2.params.client_secret");
        c.oauth2 = None;
        c.signing = Some(SigningConfig::default());
        assert_eq!(field(c.validate_auth()), "api.signing.secret_env");
    }

    /// Issue 42: a secret file was read whole, whatever its size (a log or a
    /// device named by mistake).
    #[test]
    fn a_secret_file_over_64_kib_is_refused_with_a_clear_error() {
        let dir = std::env::temp_dir().join(format!("courier-secret-cap-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("dir");
        let path = dir.join("secret");
        std::fs::write(&path, "k".repeat(64 * 1024)).expect("write");
        assert_eq!(read_secret_file(&path).map(|s| s.len()), Ok(64 * 1024));
        std::fs::write(&path, "k".repeat(64 * 1024 + 1)).expect("write");
        let e = match read_secret_file(&path) {
            Ok(s) => panic!("{} bytes read over the cap", s.len()),
            Err(e) => e,
        };
        assert!(e.contains("larger than 64 KiB"), "{e}");
        let spec = SecretSpec::File {
            field: "api.token_file",
            path: path.clone(),
        };
        let e = spec.read().expect_err("over the cap").to_string();
        assert!(e.contains("api.token_file") && e.contains("64 KiB"), "{e}");
        assert!(!e.contains("kkkk"), "{e}");
        std::fs::remove_dir_all(&dir).ok();
    }

    #[test]
    fn a_world_readable_secret_file_is_told_apart() {
        use std::os::unix::fs::PermissionsExt;
        let dir = std::env::temp_dir().join(format!("courier-secret-mode-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("dir");
        let path = dir.join("secret");
        std::fs::write(&path, "token").expect("write");
        let set = |mode| {
            std::fs::set_permissions(&path, std::fs::Permissions::from_mode(mode)).expect("chmod")
        };
        let meta = || std::fs::metadata(&path).expect("metadata");
        set(0o644);
        assert!(world_readable(&meta()));
        set(0o640);
        assert!(!world_readable(&meta()));
        set(0o400);
        assert!(!world_readable(&meta()));
        assert_eq!(read_secret_file(&path).as_deref(), Ok("token"));
        std::fs::remove_dir_all(&dir).ok();
    }

    #[test]
    fn the_401_refresh_interval_defaults_to_10s_and_is_at_least_1s() {
        let interval = |extra: &str| {
            let c = super::super::Config::from_toml(&format!(
                "[api.oauth2]\ntoken_url = \"https://idp/token\"\nclient_id = \"c\"\n\
                 client_secret_env = \"S\"\n{extra}"
            ))
            .expect("toml");
            c.api.oauth2.expect("oauth2").unauthorized_refresh_interval
        };
        assert_eq!(interval(""), Duration::from_secs(10));
        assert_eq!(
            interval("unauthorized_refresh_interval = \"30s\""),
            Duration::from_secs(30)
        );
        let mut o = oauth2("https://idp/token");
        o.unauthorized_refresh_interval = Duration::from_millis(500);
        let c = ApiConfig {
            oauth2: Some(o),
            ..ApiConfig::default()
        };
        assert_eq!(
            field(c.validate_auth()),
            "api.oauth2.unauthorized_refresh_interval"
        );
    }

    #[test]
    fn a_malformed_signing_secret_file_is_refused_without_its_value() {
        let dir = std::env::temp_dir().join(format!("courier-signing-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("dir");
        let path = dir.join("secret");
        std::fs::write(&path, "sk_live_abcdef0123456789\n").expect("write");
        let c = ApiConfig {
            signing: Some(SigningConfig {
                secret_file: Some(path.clone()),
                ..SigningConfig::default()
            }),
            ..ApiConfig::default()
        };
        let e = c.check_auth_secrets().expect_err("refused");
        assert!(e.to_string().contains("api.signing.secret_file"), "{e}");
        assert!(!e.to_string().contains("sk_live"), "{e}");
        std::fs::write(&path, "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw\n").expect("write");
        assert!(c.check_auth_secrets().is_ok());
        std::fs::remove_dir_all(&dir).ok();
    }
}
