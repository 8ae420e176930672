//! Signed requests (issue 26 item 3), verified on the receiving side by an
//! independent implementation: the Standard Webhooks reference library (PyPI
//! `standardwebhooks`, in a venv scripts/pytools.sh makes; `COURIER_TEST_PYTHON`
//! names its python, scripts/test.sh sets it) in the test's receiver
//! (`courier_testkit::webhooks`). Some events go through a route with
//! `body = "data"`, so what is signed is the body as sent, not the record. The
//! secret rotates through a Kubernetes-style secret volume: the old secret, then
//! both (the receiver switches to accepting only the new one meanwhile), then the
//! new one — no request is refused. Ends with the audit over what the receiver
//! verified: lost 0, duplicates counted.

mod common;

use base64::Engine as _;
use common::*;
use courier_standins::loadgen::{self, Spec};
use courier_standins::sink::Audit;
use courier_testkit::webhooks::Receiver;
use std::path::PathBuf;
use std::time::Duration;

fn python() -> PathBuf {
    PathBuf::from(std::env::var("COURIER_TEST_PYTHON").expect(
        "COURIER_TEST_PYTHON must name a python with standardwebhooks: run \
         `export COURIER_TEST_PYTHON=$(bash scripts/pytools.sh)` (scripts/test.sh does)",
    ))
}

/// A fresh `whsec_` secret (32 random bytes).
fn new_secret() -> String {
    let key: [u8; 32] = rand::random();
    format!(
        "whsec_{}",
        base64::engine::general_purpose::STANDARD.encode(key)
    )
}

fn spec(prefix: &str, count: usize, event_type: &str) -> Spec {
    Spec {
        count,
        keys: count,
        id_prefix: prefix.into(),
        event_type: event_type.into(),
        ..Spec::default()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn signatures_verify_with_the_reference_library_through_a_rotation() {
    let s = services();
    let dir = log_dir().join(unique("signing"));
    std::fs::create_dir_all(&dir).expect("dir");
    let (old, new) = (new_secret(), new_secret());
    let receiver = Receiver::start(&python(), &dir, &[&old])
        .await
        .expect("receiver");
    secret_volume(&dir, "signing-secret", 1, &old);
    let n = Names::new("signing", 2);
    n.create(&s, true).await;
    let url = receiver.url();
    let toml = toml_with(
        &n,
        &format!("{url}events"),
        "poll_interval = \"100ms\"\nbreaker_open = \"500ms\"\nmin_pause = \"200ms\"",
    )
    .replace("concurrency = 256", "concurrency = 16")
    .replace(
        "[pipeline]\n",
        &format!(
            "[api.signing]\nscheme = \"standard-webhooks\"\nsecret_file = \"{}\"\n\n\
             [[api.routes]]\ntype = \"profile.*\"\nurl = \"{url}profiles/{{id}}\"\nbody = \"data\"\n\n[pipeline]\n",
            dir.join("signing-secret").display()
        ),
    );
    let mut c = Courier::start("signing", &s, &toml);
    let mut produced = courier_standins::audit::Produced::default();
    let mut more = |p: courier_standins::audit::Produced| {
        produced.ids.extend(p.ids);
        produced.offsets.extend(p.offsets);
    };
    let verified = |want: usize| {
        let r = &receiver;
        move || {
            block(r.stats())
                .map(|st| st.ids.len() >= want)
                .unwrap_or(false)
        }
    };

    // The old secret: whole events to api.url, and data bodies through the route.
    more(
        loadgen::produce(&s.brokers, &n.topic, &spec("sa", 1_000, "order.created"))
            .await
            .expect("produce"),
    );
    more(
        loadgen::produce(&s.brokers, &n.topic, &spec("sb", 1_000, "profile.updated"))
            .await
            .expect("produce"),
    );
    wait_until(Duration::from_secs(60), "2,000 verified", verified(2_000)).await;

    // The rotation: both secrets in the volume; once Courier signs with both,
    // the receiver accepts only the new one.
    secret_volume(&dir, "signing-secret", 2, &format!("{old} {new}"));
    wait_until(Duration::from_secs(20), "the new secrets are read", || {
        block(c.metric("courier_secret_reloads_total{field=\"api.signing.secret_file\"")) >= 1.0
    })
    .await;
    receiver
        .set_secrets(&[&new])
        .await
        .expect("receiver secrets");
    more(
        loadgen::produce(&s.brokers, &n.topic, &spec("sc", 1_000, "profile.updated"))
            .await
            .expect("produce"),
    );
    wait_until(Duration::from_secs(60), "3,000 verified", verified(3_000)).await;

    // The old secret retired.
    secret_volume(&dir, "signing-secret", 3, &new);
    wait_until(Duration::from_secs(20), "the last secret is read", || {
        block(c.metric("courier_secret_reloads_total{field=\"api.signing.secret_file\"")) >= 2.0
    })
    .await;
    more(
        loadgen::produce(&s.brokers, &n.topic, &spec("sd", 1_000, "order.created"))
            .await
            .expect("produce"),
    );
    n.wait_committed_to_end(&s, Duration::from_secs(120)).await;

    let st = receiver.stats().await.expect("stats");
    println!(
        "[signing] verified {}, rejected {}, first rejections {:?}",
        st.verified, st.rejected, st.rejections
    );
    assert_eq!(
        st.rejected, 0,
        "every request verifies: {:?}",
        st.rejections
    );
    c.terminate(Duration::from_secs(30)).await;
    let log = c.log_text();
    for secret in [&old, &new] {
        let b64 = secret.trim_start_matches("whsec_");
        assert!(!log.contains(b64), "a signing secret is in the log");
    }
    let api = Audit {
        delivered: st
            .ids
            .iter()
            .map(|(id, n)| (id.clone(), *n as u32))
            .collect(),
        ..Audit::default()
    };
    let rep = courier_standins::audit::audit(&s.brokers, &n.dlq, &n.parking, &produced, &api)
        .expect("audit");
    assert_no_loss("signing", &rep);
    assert_eq!(
        rep.parked + rep.in_dlq,
        0,
        "nothing parked or dead-lettered: {rep}"
    );
    println!("[signing] duplicates {}", rep.duplicates);
}
