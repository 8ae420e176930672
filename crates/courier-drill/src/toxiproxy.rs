//! Toxiproxy through its HTTP API: one proxy in front of the broker's PROXIED
//! listener, cut (`enabled: false`) and healed by the partition drill.

use anyhow::{bail, Context as _};
use std::path::Path;
use std::time::Duration;

pub const API: &str = "http://127.0.0.1:8474";
pub const PROXY: &str = "courier-kafka";

pub struct Toxiproxy {
    client: reqwest::Client,
    /// Whether this drill started the server (and so stops it at the end).
    started: bool,
}

async fn api_ok(client: &reqwest::Client) -> bool {
    match client.get(format!("{API}/version")).send().await {
        Ok(r) => r.status().is_success(),
        Err(_) => false,
    }
}

impl Toxiproxy {
    /// Installs (cached) and starts the server with `scripts/toxiproxy.sh start`
    /// unless one already answers. Fails loudly when it cannot.
    pub async fn ensure(script: &Path) -> anyhow::Result<Toxiproxy> {
        let client = reqwest::Client::builder()
            .timeout(Duration::from_secs(5))
            .build()?;
        let mut started = false;
        if !api_ok(&client).await {
            crate::cluster::run_script(script, "start").await.context(
                "toxiproxy is required by this scenario and could not be installed or started",
            )?;
            started = true;
        }
        if !api_ok(&client).await {
            bail!("toxiproxy does not answer on {API}");
        }
        Ok(Toxiproxy { client, started })
    }

    /// (Re)creates the proxy `listen` → `upstream`, enabled.
    pub async fn create(&self, listen: &str, upstream: &str) -> anyhow::Result<()> {
        let _ = self
            .client
            .delete(format!("{API}/proxies/{PROXY}"))
            .send()
            .await;
        let body = serde_json::json!({
            "name": PROXY, "listen": listen, "upstream": upstream, "enabled": true
        });
        let r = self
            .client
            .post(format!("{API}/proxies"))
            .header("content-type", "application/json")
            .body(body.to_string())
            .send()
            .await
            .context("POST /proxies")?;
        if !r.status().is_success() {
            bail!(
                "POST /proxies: {} {}",
                r.status(),
                r.text().await.unwrap_or_default()
            );
        }
        Ok(())
    }

    /// Cuts (`false`) or heals (`true`) the proxy: a cut closes its connections and
    /// refuses new ones.
    pub async fn set_enabled(&self, enabled: bool) -> anyhow::Result<()> {
        let r = self
            .client
            .post(format!("{API}/proxies/{PROXY}"))
            .header("content-type", "application/json")
            .body(serde_json::json!({ "enabled": enabled }).to_string())
            .send()
            .await
            .with_context(|| format!("POST /proxies/{PROXY}"))?;
        if !r.status().is_success() {
            bail!(
                "POST /proxies/{PROXY}: {} {}",
                r.status(),
                r.text().await.unwrap_or_default()
            );
        }
        Ok(())
    }

    /// Removes the proxy, and stops the server if this drill started it.
    pub async fn cleanup(self, script: &Path) {
        let _ = self
            .client
            .delete(format!("{API}/proxies/{PROXY}"))
            .send()
            .await;
        if self.started {
            let _ = crate::cluster::run_script(script, "stop").await;
        }
    }
}
