//! The OAuth2 server of the auth tests works as they need it: a client gets a
//! token with the client-credentials grant that expires after the client's own
//! lifespan, introspection knows it, a wrong secret is refused, and a restart
//! brings the clients back. Runs when `COURIER_TEST_HYDRA` names the hydra binary
//! (`scripts/hydra.sh` prints it); skipped otherwise.

use courier_testkit::hydra::{form_urlencode, AuthMethod, Hydra};
use std::path::PathBuf;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// The hydra binary, or `None` (the test says it is skipped).
fn hydra_bin() -> Option<PathBuf> {
    match std::env::var_os("COURIER_TEST_HYDRA") {
        Some(p) if !p.is_empty() => Some(PathBuf::from(p)),
        _ => {
            println!("COURIER_TEST_HYDRA is not set (bash scripts/hydra.sh prints it): skipped");
            None
        }
    }
}

/// `POST token_url` with the client-credentials grant; (status, JSON answer).
async fn token_request(
    http: &reqwest::Client,
    token_url: &str,
    id: &str,
    secret: &str,
    method: AuthMethod,
) -> (u16, serde_json::Value) {
    let mut form = vec![("grant_type", "client_credentials")];
    let mut req = http.post(token_url);
    match method {
        AuthMethod::Basic => req = req.basic_auth(id, Some(secret)),
        AuthMethod::Post => form.extend([("client_id", id), ("client_secret", secret)]),
    }
    let resp = req
        .header("content-type", "application/x-www-form-urlencoded")
        .body(form_urlencode(&form))
        .send()
        .await
        .expect("the token endpoint answers");
    let status = resp.status().as_u16();
    let body = resp.text().await.expect("the token endpoint's answer");
    let json = serde_json::from_str(&body).expect("the token endpoint answers JSON");
    (status, json)
}

fn now_secs() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .expect("the clock is after 1970")
        .as_secs() as i64
}

#[tokio::test]
async fn client_credentials_tokens_expire_after_the_clients_lifespan() {
    let Some(bin) = hydra_bin() else { return };
    let dir = std::env::temp_dir().join(format!("courier-testkit-hydra-{}", std::process::id()));
    let mut hydra = Hydra::start(&bin, &dir).await.expect("hydra starts");
    hydra
        .create_client(
            "courier",
            "s3cret-s3cret",
            Duration::from_secs(2),
            AuthMethod::Basic,
        )
        .await
        .expect("a basic client is created");
    hydra
        .create_client(
            "courier-post",
            "p0st-s3cret",
            Duration::from_secs(2),
            AuthMethod::Post,
        )
        .await
        .expect("a post client is created");
    let http = reqwest::Client::new();

    for (id, secret, method) in [
        ("courier", "s3cret-s3cret", AuthMethod::Basic),
        ("courier-post", "p0st-s3cret", AuthMethod::Post),
    ] {
        let before = now_secs();
        let (status, tok) = token_request(&http, &hydra.token_url(), id, secret, method).await;
        assert_eq!(status, 200, "{id}: {}", tok["error"]);
        assert_eq!(tok["token_type"], "bearer");
        let expires_in = tok["expires_in"].as_i64().expect("expires_in");
        assert!((1..=2).contains(&expires_in), "expires_in {expires_in}");
        let token = tok["access_token"].as_str().expect("an access token");

        let info = hydra.introspect(token).await.expect("introspection");
        assert_eq!(info["active"], true, "{id}");
        assert_eq!(info["client_id"], id);
        let exp = info["exp"].as_i64().expect("exp");
        assert!(
            (before + 1..=now_secs() + 3).contains(&exp),
            "{id}: exp {exp}, now {}",
            now_secs()
        );

        // A wrong secret: refused as the client's fault.
        let (status, err) = token_request(&http, &hydra.token_url(), id, "wrong", method).await;
        assert_eq!(status, 401, "{err}");
        assert_eq!(err["error"], "invalid_client");
    }

    // The token expires on time: polled with a deadline.
    let (_, tok) = token_request(
        &http,
        &hydra.token_url(),
        "courier",
        "s3cret-s3cret",
        AuthMethod::Basic,
    )
    .await;
    let token = tok["access_token"]
        .as_str()
        .expect("an access token")
        .to_string();
    let until = std::time::Instant::now() + Duration::from_secs(10);
    while hydra.introspect(&token).await.expect("introspection")["active"] == true {
        assert!(
            std::time::Instant::now() < until,
            "the 2 s token is still active"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let requests = hydra.token_requests().await.expect("hydra's metrics");
    assert_eq!(requests, 5, "token requests counted");

    // Down: the token endpoint refuses connections; after the restart the same
    // client gets tokens again on the same URL.
    hydra.stop().await.expect("hydra stops");
    assert!(http.post(hydra.token_url()).send().await.is_err());
    hydra.restart().await.expect("hydra restarts");
    let (status, tok) = token_request(
        &http,
        &hydra.token_url(),
        "courier-post",
        "p0st-s3cret",
        AuthMethod::Post,
    )
    .await;
    assert_eq!(status, 200, "after the restart: {}", tok["error"]);
    assert_eq!(hydra.token_requests().await.expect("hydra's metrics"), 6);
    hydra.stop().await.expect("hydra stops");
    let _ = std::fs::remove_dir_all(&dir);
}
