//! The client against registries on local ports: answers that mean "wait",
//! answers that are permanent, what is cached and what is asked.

use super::*;
use std::sync::Mutex;

#[test]
fn credentials_never_in_debug() {
    let mut cfg = SchemaRegistryConfig {
        url: "http://127.0.0.1:1".into(),
        ..Default::default()
    };
    cfg.username = Some("u".into());
    cfg.password_env = Some("COURIER_SR_UNIT_PW".into());
    // SAFETY of the test: a variable only this test reads.
    unsafe { std::env::set_var("COURIER_SR_UNIT_PW", "s3cret-pw") };
    let r = SchemaRegistry::new(&cfg, InputFormat::Avro);
    assert!(matches!(r.auth, RegistryAuth::Basic { .. }));
    assert!(!format!("{r:?}").contains("s3cret-pw"));
}

#[tokio::test]
async fn an_unreachable_registry_is_unavailable_and_not_cached() {
    // A port nothing listens on.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let r = SchemaRegistry::new(
        &SchemaRegistryConfig {
            url: format!("http://127.0.0.1:{port}"),
            ..Default::default()
        },
        InputFormat::Protobuf,
    );
    assert!(matches!(r.get(1).await, Err(FetchError::Unavailable(_))));
    assert!(r.cache.get(&1).await.is_none());
}

/// A registry on a local port that answers every request with `body`
/// (`Content-Length` left out when `chunked`).
async fn answering(body: Vec<u8>, chunked: bool) -> String {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(async move {
        while let Ok((mut conn, _)) = listener.accept().await {
            let body = body.clone();
            tokio::spawn(async move {
                let mut buf = [0u8; 4096];
                let _ = conn.read(&mut buf).await;
                let head = if chunked {
                    "HTTP/1.1 200 OK\r\nconnection: close\r\n\r\n".to_string()
                } else {
                    format!(
                        "HTTP/1.1 200 OK\r\ncontent-length: {}\r\nconnection: close\r\n\r\n",
                        body.len()
                    )
                };
                let _ = conn.write_all(head.as_bytes()).await;
                let _ = conn.write_all(&body).await;
            });
        }
    });
    url
}

#[tokio::test]
async fn an_answer_larger_than_the_cache_is_refused_and_read_no_further() {
    let limit = 64 * 1024;
    let schema = format!(
        "syntax = \"proto3\"; message A {{ string s = 1; }} // {}",
        "x".repeat(limit)
    );
    let body = serde_json::to_vec(&serde_json::json!({"schema": schema, "schemaType": "PROTOBUF"}))
        .unwrap();
    for chunked in [false, true] {
        let r = SchemaRegistry::new(
            &SchemaRegistryConfig {
                url: answering(body.clone(), chunked).await,
                cache_max_bytes: limit,
                ..Default::default()
            },
            InputFormat::Protobuf,
        );
        match r.get(1).await.as_deref() {
            Ok(Resolved::Refused(RegistryRefusal::TooLarge, e)) => {
                assert!(e.contains("cache_max_bytes"), "{e}")
            }
            other => panic!("{other:?}"),
        }
    }
    // Within the limit: compiled for input.format.
    let small = serde_json::to_vec(&serde_json::json!({
        "schema": "syntax = \"proto3\"; message A { string s = 1; }",
        "schemaType": "PROTOBUF"
    }))
    .unwrap();
    let url = answering(small, false).await;
    let cfg = SchemaRegistryConfig {
        url,
        ..Default::default()
    };
    let r = SchemaRegistry::new(&cfg, InputFormat::Protobuf);
    assert!(matches!(&*r.get(1).await.unwrap(), Resolved::Protobuf(_)));
    let r = SchemaRegistry::new(&cfg, InputFormat::Avro);
    assert!(matches!(&*r.get(1).await.unwrap(), Resolved::Other(k) if k == "PROTOBUF"));
}

/// A registry on a local port answering each request with `answer(path)`
/// (status, JSON body); the paths it was asked, in order.
async fn serving(
    answer: impl Fn(&str) -> (u16, String) + Send + Sync + 'static,
) -> (String, Arc<Mutex<Vec<String>>>) {
    let asked = Arc::new(Mutex::new(Vec::new()));
    let seen = asked.clone();
    let answer = Arc::new(answer);
    let app = axum::Router::new().fallback(move |uri: axum::http::Uri| {
        let (answer, seen) = (answer.clone(), seen.clone());
        async move {
            let path = uri.path().to_string();
            seen.lock().unwrap().push(path.clone());
            let (status, body) = answer(&path);
            (
                axum::http::StatusCode::from_u16(status).unwrap(),
                [("content-type", "application/json")],
                body,
            )
        }
    });
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, app).await });
    (url, asked)
}

fn registry_at(url: &str, format: InputFormat) -> SchemaRegistry {
    SchemaRegistry::new(
        &SchemaRegistryConfig {
            url: url.to_string(),
            ..Default::default()
        },
        format,
    )
}

fn error_body(code: u32) -> String {
    serde_json::json!({"error_code": code, "message": "refused"}).to_string()
}

/// A JSON Schema answer naming `references` (subject, version).
fn json_schema_answer(references: &[(String, i64)]) -> String {
    let refs: Vec<_> = references
        .iter()
        .map(|(s, v)| serde_json::json!({"name": format!("{s}.json"), "subject": s, "version": v}))
        .collect();
    serde_json::json!({"schema": "{}", "schemaType": "JSON", "references": refs}).to_string()
}

#[tokio::test]
async fn permanent_answers_are_not_an_outage() {
    for (status, body) in [
        (400, error_body(40002)),
        (422, error_body(42201)),
        (200, r#"{"not": "a schema"}"#.to_string()),
        (200, r#"{"schema": 7}"#.to_string()),
    ] {
        let (url, asked) = serving(move |_| (status, body.clone())).await;
        let r = registry_at(&url, InputFormat::Avro);
        let got = r.get(1).await;
        assert!(
            matches!(
                got.as_deref(),
                Ok(Resolved::Refused(RegistryRefusal::BadSchema, _))
            ),
            "HTTP {status}: {got:?}"
        );
        // Cached: the next record naming the id does not ask again.
        assert!(r.get(1).await.is_ok());
        assert_eq!(asked.lock().unwrap().len(), 1, "HTTP {status}");
    }
}

#[tokio::test]
async fn a_reference_the_registry_does_not_know_is_permanent() {
    let (url, _) = serving(|path| match path {
        "/schemas/ids/1" => (200, json_schema_answer(&[("gone".into(), 1)])),
        _ => (404, error_body(40401)),
    })
    .await;
    let r = registry_at(&url, InputFormat::JsonSchema);
    match r.get(1).await.as_deref() {
        Ok(Resolved::Refused(RegistryRefusal::UnknownReference, e)) => {
            assert!(e.contains("subject gone version 1"), "{e}")
        }
        other => panic!("{other:?}"),
    }
}

#[tokio::test]
async fn references_nested_too_deep_or_in_a_cycle_are_permanent() {
    // s0 → s1 → … → s19: deeper than the 16 levels followed.
    let (url, _) = serving(|path| {
        if path == "/schemas/ids/1" {
            return (200, json_schema_answer(&[("s0".into(), 1)]));
        }
        let n: u32 = path
            .trim_start_matches("/subjects/s")
            .trim_end_matches("/versions/1")
            .parse()
            .unwrap();
        let next = if n < 19 {
            vec![(format!("s{}", n + 1), 1)]
        } else {
            vec![]
        };
        (200, json_schema_answer(&next))
    })
    .await;
    let got = registry_at(&url, InputFormat::JsonSchema).get(1).await;
    assert!(
        matches!(
            got.as_deref(),
            Ok(Resolved::Refused(RegistryRefusal::TooDeep, _))
        ),
        "too deep: {got:?}"
    );
    // a → b → a.
    let (url, _) = serving(|path| match path {
        "/schemas/ids/1" | "/subjects/b/versions/1" => {
            (200, json_schema_answer(&[("a".into(), 1)]))
        }
        _ => (200, json_schema_answer(&[("b".into(), 1)])),
    })
    .await;
    let got = registry_at(&url, InputFormat::JsonSchema).get(1).await;
    assert!(
        matches!(
            got.as_deref(),
            Ok(Resolved::Refused(RegistryRefusal::BadSchema, _))
        ),
        "a cycle: {got:?}"
    );
}

#[tokio::test]
async fn an_unknown_id_is_asked_for_once_while_its_answer_is_cached() {
    let (url, asked) = serving(|_| (404, error_body(40403))).await;
    let r = registry_at(&url, InputFormat::Avro);
    let start = Instant::now();
    for _ in 0..3 {
        assert!(matches!(&*r.get(7).await.unwrap(), Resolved::Unknown));
    }
    // The 404 asked again twice (0.5 s, then 1 s later), then cached.
    assert_eq!(*asked.lock().unwrap(), ["/schemas/ids/7"; 3]);
    assert!(start.elapsed() >= Duration::from_millis(1500));
}

/// Issue 54, item 9: a registry that answers 404 for an id a moment, then
/// knows it (a follower behind its leader): nothing is parked. Seen failing
/// on 45109fa: the first 404 resolved the id as unknown.
#[tokio::test]
async fn an_id_unknown_for_a_moment_is_asked_again_before_its_records_park() {
    let answers = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let n = answers.clone();
    let (url, asked) = serving(move |_| {
        if n.fetch_add(1, std::sync::atomic::Ordering::SeqCst) < 2 {
            (404, error_body(40403))
        } else {
            let schema = r#"{"type": "record", "name": "E", "fields": []}"#;
            (200, serde_json::json!({"schema": schema}).to_string())
        }
    })
    .await;
    let r = registry_at(&url, InputFormat::Avro);
    let got = r.get(7).await;
    assert!(matches!(got.as_deref(), Ok(Resolved::Avro(_))), "{got:?}");
    assert_eq!(asked.lock().unwrap().len(), 3);
}

#[tokio::test]
async fn each_reference_is_fetched_once_per_resolution() {
    // Level i has two subjects, each referencing both of level i + 1: 2^i
    // paths lead to level i, 2 subjects are there.
    const LEVELS: u32 = 10;
    let level = |i: u32| -> Vec<(String, i64)> {
        if i == LEVELS {
            return vec![];
        }
        vec![(format!("l{i}a"), 1), (format!("l{i}b"), 1)]
    };
    let (url, asked) = serving(move |path| {
        if path == "/schemas/ids/1" {
            return (200, json_schema_answer(&level(0)));
        }
        let i: u32 = path["/subjects/l".len()..]
            .trim_end_matches("/versions/1")
            .trim_end_matches(['a', 'b'])
            .parse()
            .unwrap();
        (200, json_schema_answer(&level(i + 1)))
    })
    .await;
    let got = registry_at(&url, InputFormat::JsonSchema).get(1).await;
    assert!(
        matches!(got.as_deref(), Ok(Resolved::JsonSchema(_))),
        "{got:?}"
    );
    let n = asked.lock().unwrap().len();
    assert_eq!(n, 1 + 2 * LEVELS as usize, "requests");
}

#[tokio::test]
async fn a_subject_named_dot_dot_never_leaves_its_segment() {
    for subject in ["..", "."] {
        let (url, asked) = serving(move |path| match path {
            "/schemas/ids/1" => (200, json_schema_answer(&[(subject.into(), 1)])),
            _ => (200, json_schema_answer(&[])),
        })
        .await;
        let got = registry_at(&url, InputFormat::JsonSchema).get(1).await;
        assert!(
            matches!(
                got.as_deref(),
                Ok(Resolved::Refused(RegistryRefusal::UnknownReference, _))
            ),
            "{subject}: {got:?}"
        );
        let asked = asked.lock().unwrap().clone();
        assert_eq!(asked, ["/schemas/ids/1"], "{subject}");
    }
}

#[tokio::test]
async fn answers_that_say_nothing_of_the_schema_are_waited_out() {
    for (status, body) in [
        (429, error_body(42901)),
        (401, error_body(40101)),
        (403, error_body(40301)),
        (408, String::new()),
        (500, error_body(50001)),
        (503, "<html>down</html>".to_string()),
        (200, "<html>a captive portal</html>".to_string()),
        (302, String::new()),
    ] {
        let (url, asked) = serving(move |_| (status, body.clone())).await;
        let r = registry_at(&url, InputFormat::Avro);
        assert!(
            matches!(r.get(1).await, Err(FetchError::Unavailable(_))),
            "HTTP {status}"
        );
        // Not cached: asked again.
        assert!(r.get(1).await.is_err());
        assert_eq!(asked.lock().unwrap().len(), 2, "HTTP {status}");
    }
}

#[tokio::test]
async fn a_schema_that_panicked_the_compiler_is_refused_for_good() {
    // apache-avro unwraps its own check of a named type's name: refused
    // before it sees it (`malformed_avro`, the parse error of a bad schema).
    let (url, asked) = serving(|_| {
        let schema = r#"{"type": "record", "name": "", "fields": []}"#;
        (200, serde_json::json!({"schema": schema}).to_string())
    })
    .await;
    let r = registry_at(&url, InputFormat::Avro);
    let got = r.get(1).await;
    assert!(matches!(got.as_deref(), Ok(Resolved::Broken(_))), "{got:?}");
    assert!(r.get(1).await.is_ok());
    assert_eq!(asked.lock().unwrap().len(), 1);
    // And any compiler that panics: that schema's refusal, not an outage.
    let got = compile_off_thread(|| panic!("a bug in a schema library")).await;
    assert!(
        matches!(&got, Err(Failure::Refused(RegistryRefusal::BadSchema, m)) if m.contains("a bug")),
        "{got:?}"
    );
}

#[test]
fn refusals_expire_schemas_stay() {
    use moka::Expiry;
    let ttl = Ttl {
        negative: Duration::from_secs(60),
    };
    let at = |r: Resolved| ttl.expire_after_create(&1, &Arc::new(r), Instant::now());
    assert_eq!(at(Resolved::Unknown), Some(Duration::from_secs(60)));
    assert_eq!(
        at(Resolved::Refused(RegistryRefusal::TooDeep, String::new())),
        Some(Duration::from_secs(60))
    );
    assert_eq!(at(Resolved::Other("PROTOBUF".into())), None);
    assert_eq!(at(Resolved::Broken("does not parse".into())), None);
}
