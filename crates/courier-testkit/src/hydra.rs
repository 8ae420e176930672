//! A real OAuth2 server for the auth tests: ory/hydra (`scripts/hydra.sh` builds
//! it) run as `hydra serve all --dev` with an in-memory database on two free
//! ports of 127.0.0.1, public (the token endpoint) and admin (clients,
//! introspection, metrics). Clients use the client-credentials grant with their
//! own access-token lifespan, so tokens can expire every few seconds.
//!
//! With `DSN=memory` everything hydra knows is lost when it stops: [`Hydra::restart`]
//! re-creates the clients this handle created (same ids and secrets), but tokens
//! issued before the restart are no longer known to it (introspection says
//! `active: false`).

use super::service::{excerpt, json_answer, wait_ready};
use super::{file_err, free_port, metric_sum, ChildGuard, TestkitError};
use std::path::{Path, PathBuf};
use std::sync::{Mutex, PoisonError};
use std::time::Duration;
use tokio::process::Command;

/// How long hydra may take to answer `/health/ready` (it runs its SQL migrations
/// into the in-memory database first).
const START_TIMEOUT: Duration = Duration::from_secs(60);
/// How long a SIGTERM'd hydra may take to exit before it is killed.
const STOP_GRACE: Duration = Duration::from_secs(10);
/// Deadline of one request to hydra's admin or public API.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(10);

/// How a client authenticates at the token endpoint (OAuth2's
/// `token_endpoint_auth_method`; Courier's `auth_style` "basic" and "body").
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AuthMethod {
    /// `client_secret_basic`: id and secret in an `Authorization: Basic` header.
    Basic,
    /// `client_secret_post`: `client_id` and `client_secret` as form parameters.
    Post,
}

impl AuthMethod {
    /// The name hydra's admin API uses.
    pub fn as_str(self) -> &'static str {
        match self {
            AuthMethod::Basic => "client_secret_basic",
            AuthMethod::Post => "client_secret_post",
        }
    }
}

/// One OAuth2 client allowed the client-credentials grant.
#[derive(Debug, Clone)]
pub struct OAuthClient {
    pub id: String,
    pub secret: String,
    /// The `expires_in` of the access tokens it gets (hydra's per-client
    /// `client_credentials_grant_access_token_lifespan`).
    pub token_lifespan: Duration,
    pub auth_method: AuthMethod,
    /// The scopes (space-separated) it may ask for; `None`: hydra's default, which
    /// refuses a request with any other `scope` (`invalid_scope`).
    pub scope: Option<String>,
    /// The audiences it may ask for (the `audience` parameter; others are refused).
    pub audience: Vec<String>,
}

impl OAuthClient {
    /// A client with no scope or audience of its own.
    pub fn new(id: &str, secret: &str, token_lifespan: Duration, auth_method: AuthMethod) -> Self {
        OAuthClient {
            id: id.to_string(),
            secret: secret.to_string(),
            token_lifespan,
            auth_method,
            scope: None,
            audience: Vec::new(),
        }
    }

    /// The admin API's JSON for this client.
    fn to_json(&self) -> serde_json::Value {
        let mut c = serde_json::json!({
            "client_id": self.id,
            "client_secret": self.secret,
            "grant_types": ["client_credentials"],
            "token_endpoint_auth_method": self.auth_method.as_str(),
            // A Go duration: "2000ms".
            "client_credentials_grant_access_token_lifespan":
                format!("{}ms", self.token_lifespan.as_millis()),
            "audience": self.audience,
        });
        if let Some(scope) = &self.scope {
            c["scope"] = serde_json::Value::from(scope.as_str());
        }
        c
    }
}

/// A running hydra (or a stopped one that [`Hydra::restart`] starts again on the
/// same ports). Dropping it kills the process.
pub struct Hydra {
    bin: PathBuf,
    dir: PathBuf,
    public_port: u16,
    admin_port: u16,
    /// `SECRETS_SYSTEM` (hydra signs and encrypts with it); never printed.
    system_secret: String,
    child: Option<ChildGuard>,
    /// Every client created through this handle, re-created by a restart.
    clients: Mutex<Vec<OAuthClient>>,
    /// Token-endpoint requests counted by the runs before this one.
    earlier_token_requests: u64,
    /// How many times hydra was started (names the logs of earlier runs).
    runs: u32,
    http: reqwest::Client,
}

impl Hydra {
    /// Starts `bin` (`hydra serve all --dev`, `DSN=memory`) on two free ports, its
    /// output in `dir/hydra.log`, and waits until `/health/ready` answers 200 on
    /// both ports. Must be called within a Tokio runtime.
    pub async fn start(bin: &Path, dir: &Path) -> Result<Hydra, TestkitError> {
        std::fs::create_dir_all(dir).map_err(file_err("creating", dir))?;
        let http = reqwest::Client::builder()
            .timeout(REQUEST_TIMEOUT)
            .build()
            .map_err(|source| TestkitError::Http {
                what: "building an HTTP client for hydra",
                url: String::new(),
                source,
            })?;
        let mut hydra = Hydra {
            bin: bin.to_path_buf(),
            dir: dir.to_path_buf(),
            public_port: free_port()?,
            admin_port: free_port()?,
            system_secret: random_hex(32)?,
            child: None,
            clients: Mutex::new(Vec::new()),
            earlier_token_requests: 0,
            runs: 0,
            http,
        };
        hydra.spawn().await?;
        Ok(hydra)
    }

    /// The token endpoint: `http://127.0.0.1:<public>/oauth2/token`.
    pub fn token_url(&self) -> String {
        format!("http://127.0.0.1:{}/oauth2/token", self.public_port)
    }

    /// The introspection endpoint (admin API, no authentication):
    /// `http://127.0.0.1:<admin>/admin/oauth2/introspect`.
    pub fn introspect_url(&self) -> String {
        format!(
            "http://127.0.0.1:{}/admin/oauth2/introspect",
            self.admin_port
        )
    }

    /// The public API's base URL (the issuer): `http://127.0.0.1:<public>/`.
    pub fn public_url(&self) -> String {
        format!("http://127.0.0.1:{}/", self.public_port)
    }

    /// The admin API's base URL: `http://127.0.0.1:<admin>/`.
    pub fn admin_url(&self) -> String {
        format!("http://127.0.0.1:{}/", self.admin_port)
    }

    /// The current run's output (earlier runs' are `hydra.<n>.log` beside it).
    pub fn log(&self) -> PathBuf {
        self.dir.join("hydra.log")
    }

    /// Whether hydra runs (started and not stopped through this handle).
    pub fn is_running(&self) -> bool {
        self.child.as_ref().is_some_and(ChildGuard::is_live)
    }

    /// Creates a client with the client-credentials grant whose tokens last
    /// `token_lifespan`; see [`Self::create`] for scopes and audiences.
    pub async fn create_client(
        &self,
        id: &str,
        secret: &str,
        token_lifespan: Duration,
        auth_method: AuthMethod,
    ) -> Result<(), TestkitError> {
        self.create(&OAuthClient::new(id, secret, token_lifespan, auth_method))
            .await
    }

    /// Creates `client` through the admin API (`POST /admin/clients`) and
    /// remembers it for [`Self::restart`].
    pub async fn create(&self, client: &OAuthClient) -> Result<(), TestkitError> {
        self.post_client(client).await?;
        self.clients
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push(client.clone());
        Ok(())
    }

    /// The introspection of `token` (RFC 7662: `active`, `exp`, `client_id`, …).
    pub async fn introspect(&self, token: &str) -> Result<serde_json::Value, TestkitError> {
        let url = self.introspect_url();
        let what = "introspecting a token at hydra";
        let resp = self
            .http
            .post(&url)
            .header("content-type", "application/x-www-form-urlencoded")
            .body(form_urlencode(&[("token", token)]))
            .send()
            .await
            .map_err(|source| TestkitError::Http {
                what,
                url: url.clone(),
                source,
            })?;
        json_answer(what, &url, resp, 200).await
    }

    /// How many requests the token endpoint answered (any status), over all runs
    /// of this handle; read from hydra's `http_requests_total` metric.
    pub async fn token_requests(&self) -> Result<u64, TestkitError> {
        Ok(self.earlier_token_requests + self.this_run_token_requests().await?)
    }

    /// Stops hydra (SIGTERM; killed if it does not exit within 10 s). The token
    /// endpoint then refuses connections until [`Self::restart`].
    pub async fn stop(&mut self) -> Result<(), TestkitError> {
        if !self.is_running() {
            return Ok(());
        }
        // What this run counted, kept for `token_requests` (lost if hydra no
        // longer answers: then it is not running as a token endpoint either).
        self.earlier_token_requests += self.this_run_token_requests().await.unwrap_or(0);
        if let Some(mut child) = self.child.take() {
            child.stop("-TERM", STOP_GRACE).await;
        }
        Ok(())
    }

    /// Stops hydra if it runs, starts it again on the same ports and re-creates
    /// every client created through this handle (same ids and secrets).
    pub async fn restart(&mut self) -> Result<(), TestkitError> {
        self.stop().await?;
        self.spawn().await?;
        let clients = self
            .clients
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone();
        for c in &clients {
            self.post_client(c).await?;
        }
        Ok(())
    }

    /// Starts hydra on this handle's ports and waits until both APIs are ready.
    async fn spawn(&mut self) -> Result<(), TestkitError> {
        let log = self.log();
        if self.runs > 0 && log.exists() {
            let kept = self.dir.join(format!("hydra.{}.log", self.runs));
            std::fs::rename(&log, &kept).map_err(file_err("renaming", &log))?;
        }
        self.runs += 1;
        let mut cmd = Command::new(&self.bin);
        cmd.args(["serve", "all", "--dev", "--sqa-opt-out"])
            // Hydra reads its whole configuration from the environment: start
            // from nothing so that no variable of the machine changes it.
            .env_clear()
            .env("PATH", std::env::var_os("PATH").unwrap_or_default())
            .env("HOME", std::env::var_os("HOME").unwrap_or_default())
            .env("DSN", "memory")
            .env("SECRETS_SYSTEM", &self.system_secret)
            .env("SERVE_PUBLIC_HOST", "127.0.0.1")
            .env("SERVE_PUBLIC_PORT", self.public_port.to_string())
            .env("SERVE_ADMIN_HOST", "127.0.0.1")
            .env("SERVE_ADMIN_PORT", self.admin_port.to_string())
            .env("URLS_SELF_ISSUER", self.public_url())
            .env("SQA_OPT_OUT", "true")
            .env("LOG_LEVEL", "info");
        let mut child = ChildGuard::spawn("hydra", cmd, &log)?;
        for port in [self.admin_port, self.public_port] {
            let url = format!("http://127.0.0.1:{port}/health/ready");
            wait_ready(&mut child, &self.http, &url, START_TIMEOUT).await?;
        }
        self.child = Some(child);
        Ok(())
    }

    /// `POST /admin/clients` for `client`.
    async fn post_client(&self, client: &OAuthClient) -> Result<(), TestkitError> {
        let url = format!("{}admin/clients", self.admin_url());
        let what = "creating an OAuth2 client at hydra";
        let resp = self
            .http
            .post(&url)
            .header("content-type", "application/json")
            .body(client.to_json().to_string())
            .send()
            .await
            .map_err(|source| TestkitError::Http {
                what,
                url: url.clone(),
                source,
            })?;
        // The answer repeats the client's secret: checked, never shown.
        let status = resp.status().as_u16();
        if status != 201 {
            let body = resp.text().await.unwrap_or_default();
            return Err(TestkitError::Status {
                what,
                url,
                status,
                body: excerpt(&body.replace(&client.secret, "<secret>")),
            });
        }
        Ok(())
    }

    /// The token-endpoint requests the running hydra counted (0 if none runs).
    async fn this_run_token_requests(&self) -> Result<u64, TestkitError> {
        if !self.is_running() {
            return Ok(0);
        }
        let url = format!("{}admin/metrics/prometheus", self.admin_url());
        let scrape_err = |source| TestkitError::Scrape {
            url: url.clone(),
            source,
        };
        let resp = self.http.get(&url).send().await.map_err(scrape_err)?;
        let text = resp.text().await.map_err(scrape_err)?;
        let n = metric_sum(&text, r#"http_requests_total{endpoint="/oauth2/token""#);
        Ok(n as u64)
    }
}

/// `application/x-www-form-urlencoded` of `pairs` (the body of a token or an
/// introspection request).
pub fn form_urlencode(pairs: &[(&str, &str)]) -> String {
    fn encode(s: &str, out: &mut String) {
        for b in s.bytes() {
            match b {
                b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'.' | b'_' | b'*' => {
                    out.push(b as char)
                }
                b' ' => out.push('+'),
                _ => out.push_str(&format!("%{b:02X}")),
            }
        }
    }
    let mut out = String::new();
    for (i, (k, v)) in pairs.iter().enumerate() {
        if i > 0 {
            out.push('&');
        }
        encode(k, &mut out);
        out.push('=');
        encode(v, &mut out);
    }
    out
}

/// `bytes` random bytes from the kernel, in hex.
fn random_hex(bytes: usize) -> Result<String, TestkitError> {
    use std::io::Read;
    let path = Path::new("/dev/urandom");
    let mut buf = vec![0u8; bytes];
    std::fs::File::open(path)
        .and_then(|mut f| f.read_exact(&mut buf))
        .map_err(file_err("reading", path))?;
    Ok(buf.iter().map(|b| format!("{b:02x}")).collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn form_encoding_escapes_what_a_form_must() {
        assert_eq!(
            form_urlencode(&[("grant_type", "client_credentials"), ("scope", "a:b c")]),
            "grant_type=client_credentials&scope=a%3Ab+c"
        );
        assert_eq!(form_urlencode(&[("x", "é&=")]), "x=%C3%A9%26%3D");
    }

    #[test]
    fn a_client_asks_for_its_lifespan_as_a_go_duration() {
        let mut c = OAuthClient::new("c", "s", Duration::from_secs(2), AuthMethod::Post);
        c.scope = Some("events:write".into());
        let j = c.to_json();
        assert_eq!(
            j["client_credentials_grant_access_token_lifespan"],
            "2000ms"
        );
        assert_eq!(j["token_endpoint_auth_method"], "client_secret_post");
        assert_eq!(j["grant_types"][0], "client_credentials");
        assert_eq!(j["scope"], "events:write");
    }
}
