//! Issue 14 items 1 and 2 against the real broker: adaptive concurrency finds an
//! API's hidden capacity (at most K requests at once, 429 above it) and stays
//! under it, also over batch requests (issue 25); a group-wide rate limit
//! shared through Redis holds for two and three instances. Every test ends with the audit (lost 0). No timing
//! assertions: what is asserted are the API's own books.

mod common;

use common::*;
use courier_standins::loadgen::{self, Spec};
use courier_standins::sink::{Audit, Behaviour, SinkHandle};
use std::time::Duration;

/// One test of this file at a time. They share one Redis, which
/// `no_burst_above_the_limit_when_redis_returns` stops and starts; and their
/// per-second books at the API are wall-clock counts that two or three Courier
/// processes of a neighbouring test can skew on a 2-core machine (CI saw a
/// second of 338 requests followed by one of 639 while a three-instance test
/// ran beside it: the calls were granted in the first and sent in the second).
static ONE_AT_A_TIME: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// Requests (`per_second`: the audit's `per_second`, or its
/// `per_second_batches` for batch requests) and 429s for capacity from `skip`
/// whole seconds after the first request on (the start-up probe is over by
/// then).
fn over_capacity_after(audit: &Audit, per_second: &[u64], skip: usize) -> (u64, u64) {
    let first = per_second.iter().position(|&n| n > 0).unwrap_or(0);
    let from = first + skip;
    let requests: u64 = per_second.iter().skip(from).sum();
    let rejected: u64 = audit.per_second_over_capacity.iter().skip(from).sum();
    (requests, rejected)
}

/// Hidden capacity K = 20 at 20 ms (1,000/s at most) and `pipeline.concurrency
/// = 256`: Courier converges under K and, after its first seconds, fewer than
/// 1 % of its requests are answered 429.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn adaptive_concurrency_finds_a_hidden_capacity() {
    let _one = ONE_AT_A_TIME.lock().await;
    const K: u64 = 20;
    let s = services();
    let n = Names::new("capacity", 4);
    n.create(&s, true).await;
    let api = SinkHandle::start(
        "127.0.0.1:0".parse().unwrap(),
        Behaviour {
            latency_ms: 20,
            capacity: Some(K),
            ..Behaviour::default()
        },
    )
    .await
    .unwrap();
    let spec = Spec {
        count: 12_000,
        keys: 12_000,
        id_prefix: "cap".into(),
        ..Spec::default()
    };
    let produced = loadgen::produce(&s.brokers, &n.topic, &spec).await.unwrap();
    let mut c = Courier::start(&n.topic, &s, &base_toml(&n, &api.url()));
    n.wait_committed_to_end(&s, Duration::from_secs(180)).await;
    let limit = c.metric("courier_api_concurrency_limit").await;
    assert!(
        (1.0..=256.0).contains(&limit),
        "the limit stays within 1..=pipeline.concurrency: {limit}"
    );
    assert_eq!(c.terminate(Duration::from_secs(30)).await, Some(0));

    let audit = api.audit();
    let (requests, rejected) = over_capacity_after(&audit, &audit.per_second, 5);
    let all_rejected: u64 = audit.per_second_over_capacity.iter().sum();
    println!(
        "limit at the end {limit}; API peak concurrency {} (capacity {K}); 429s {all_rejected} in all, {rejected} of {requests} requests after the first 5 s",
        audit.max_concurrent
    );
    println!("per second: {:?}", audit.per_second);
    println!("429s per second: {:?}", audit.per_second_over_capacity);
    assert!(requests > 0, "requests after the first 5 s");
    assert!(
        (rejected as f64) < 0.01 * requests as f64,
        "{rejected} of {requests} requests answered 429 after the first 5 s"
    );
    let rep = n.audit(&s, &produced, &api);
    assert_no_loss("capacity", &rep);
}

/// With batching the adaptive limit holds requests (a batch is one): hidden
/// capacity K = 20 requests at 40 ms, batches of 5 and `pipeline.concurrency
/// = 2000` events (room for 400 batches at once if nothing held them back).
/// Courier converges under K requests and, after its first seconds, fewer
/// than 2 % of its batch requests are answered 429 (measured 0.3-0.6 %: each
/// probe past K costs a request of 5 events). Before, the limit was off with
/// batching and the events' permits alone let hundreds of requests go.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn adaptive_concurrency_holds_batch_requests_under_a_hidden_capacity() {
    let _one = ONE_AT_A_TIME.lock().await;
    const K: u64 = 20;
    let s = services();
    let n = Names::new("capacity-batch", 4);
    n.create(&s, true).await;
    let api = SinkHandle::start(
        "127.0.0.1:0".parse().expect("addr"),
        Behaviour {
            latency_ms: 40,
            capacity: Some(K),
            ..Behaviour::default()
        },
    )
    .await
    .expect("stand-in");
    let spec = Spec {
        count: 25_000,
        keys: 25_000,
        id_prefix: "capb".into(),
        ..Spec::default()
    };
    let produced = loadgen::produce(&s.brokers, &n.topic, &spec)
        .await
        .expect("produce");
    let toml = base_toml(&n, &format!("http://{}/batch", api.addr()))
        .replace(
            "[pipeline]\n",
            "[api.batch]\nmax_events = 5\nlinger = \"5ms\"\n\n[pipeline]\n",
        )
        .replace("concurrency = 256", "concurrency = 2000");
    let mut c = Courier::start(&n.topic, &s, &toml);
    n.wait_committed_to_end(&s, Duration::from_secs(180)).await;
    let limit = c.metric("courier_api_concurrency_limit").await;
    assert_eq!(c.terminate(Duration::from_secs(30)).await, Some(0));

    let audit = api.audit();
    let (requests, rejected) = over_capacity_after(&audit, &audit.per_second_batches, 5);
    let all_rejected: u64 = audit.per_second_over_capacity.iter().sum();
    println!(
        "limit at the end {limit} requests; {} batch requests, {} items; 429s {all_rejected} in all, {rejected} of {requests} requests after the first 5 s",
        audit.batch_requests, audit.batch_items
    );
    println!("batch requests per second: {:?}", audit.per_second_batches);
    println!("429s per second: {:?}", audit.per_second_over_capacity);
    assert!(
        (1.0..400.0).contains(&limit),
        "the limit counts requests, not the 2,000 events: {limit}"
    );
    assert!(requests > 0, "batch requests after the first 5 s");
    assert!(
        (rejected as f64) < 0.02 * requests as f64,
        "{rejected} of {requests} batch requests answered 429 after the first 5 s"
    );
    let rep = n.audit(&s, &produced, &api);
    println!("[capacity-batch] {rep}");
    assert_no_loss("capacity-batch", &rep);
}

/// `n` instances of one group share `api.rate_limit_per_sec = 500` through
/// Redis: the API never sees more than 500/s + 5 % in any whole second, and
/// everything is delivered (audit). Returns the API's per-second counts.
async fn shared_rate_limit(name: &str, instances: usize, redis_url: Option<&str>) -> Vec<u64> {
    const RATE: u64 = 500;
    let s = services();
    let n = Names::new(name, 6);
    n.create(&s, true).await;
    let api = api_with_latency(5).await;
    let spec = Spec {
        count: 6_000,
        keys: 6_000,
        id_prefix: name.into(),
        ..Spec::default()
    };
    // The rate settings join the base config's [api] table.
    let toml = base_toml(&n, &api.url()).replacen(
        "\n[api]\n",
        &format!("\n[api]\nrate_limit_per_sec = {RATE}\nrate_limit_burst = 5\n"),
        1,
    );
    let env: Vec<(&str, &str)> = redis_url
        .map(|u| vec![("COURIER__REDIS__URL", u)])
        .unwrap_or_default();
    let mut cs: Vec<Courier> = (0..instances)
        .map(|i| Courier::start_with_env(&format!("{}-{i}", n.topic), &s, &toml, &env))
        .collect();
    // Every instance holds partitions before the events arrive: the group's
    // steady state is measured, not its rebalances.
    let deadline = std::time::Instant::now() + Duration::from_secs(90);
    loop {
        let mut all = true;
        for c in &cs {
            all &= c.metric("courier_assigned_partitions").await > 0.0;
        }
        if all {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "every instance gets partitions"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let produced = loadgen::produce(&s.brokers, &n.topic, &spec).await.unwrap();
    n.wait_committed_to_end(&s, Duration::from_secs(180)).await;
    for c in &cs {
        let limit = c
            .metric("courier_api_rate_limit_per_sec{scope=\"group\"")
            .await;
        assert_eq!(limit, RATE as f64, "the limit shows as a metric");
    }
    let granted = cs[0]
        .metric("courier_api_rate_permits_total{result=\"granted\"")
        .await;
    assert!(granted > 0.0, "permits counted");
    for c in &mut cs {
        assert_eq!(c.terminate(Duration::from_secs(30)).await, Some(0));
    }
    let audit = api.audit();
    let table: Vec<String> = audit
        .per_second
        .iter()
        .enumerate()
        .map(|(i, n)| format!("{i}:{n}"))
        .collect();
    println!(
        "[{name}] {instances} instances, API requests per whole second: {}",
        table.join(" ")
    );
    assert_per_second_within(&audit, RATE, 0);
    let rep = n.audit(&s, &produced, &api);
    assert_no_loss(name, &rep);
    assert_eq!(rep.delivered, 6_000);
    audit.per_second
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_instances_share_a_rate_limit_through_redis() {
    let _one = ONE_AT_A_TIME.lock().await;
    shared_rate_limit("rate2", 2, None).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_instances_share_a_rate_limit_through_redis() {
    let _one = ONE_AT_A_TIME.lock().await;
    shared_rate_limit("rate3", 3, None).await;
}

/// Redis unreachable from the start: a single instance limits itself locally
/// (its share: the whole rate, since it has seen no other instance).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_redis_an_instance_limits_itself_locally() {
    let _one = ONE_AT_A_TIME.lock().await;
    let port = free_port();
    let url = format!("redis://127.0.0.1:{port}");
    shared_rate_limit("rate-local", 1, Some(&url)).await;
}

/// Redis unreachable from the start, two instances: neither knows of the other
/// through Redis, so each takes its part of the topic's partitions (3 of 6) as
/// its share of the rate, and together they stay within it. Before, each took
/// the whole rate (an instance that never reached Redis knew of no other).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_redis_two_instances_share_the_rate_by_partitions() {
    let _one = ONE_AT_A_TIME.lock().await;
    let port = free_port();
    let url = format!("redis://127.0.0.1:{port}");
    shared_rate_limit("rate-local2", 2, Some(&url)).await;
}

/// The Redis script itself, against the real Redis: a burst after an idle
/// spell, then nothing until the steady rate allows; no burst for a caller
/// coming back from its fallback; both members counted live; a `Retry-After`
/// pause from one instance holds the other.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_redis_script_shares_one_limit_and_one_pause() {
    let _one = ONE_AT_A_TIME.lock().await;
    use courier::delivery::ratelimit::RateLimiter;
    use fred::prelude::*;
    use std::sync::Arc;
    let s = services();
    let client = Builder::from_config(Config::from_url(&s.redis_url).unwrap())
        .build()
        .unwrap();
    client.init().await.expect("Redis");
    let prefix = unique("ratescript");
    // 1,000/s, burst 10: batches of 10.
    let a = Arc::new(RateLimiter::new(
        1000,
        10,
        Some(client.clone()),
        &prefix,
        "a",
    ));
    let b = Arc::new(RateLimiter::new(
        1000,
        10,
        Some(client.clone()),
        &prefix,
        "b",
    ));
    // Started before the first call and read after the second returns: an upper
    // bound on the time between the two scripts' runs in Redis (a bound that
    // started after the first call returned missed the time its answer took to
    // come back, and failed once at load 10: 7 granted, 4 accrued).
    let around = std::time::Instant::now();
    let (granted, _, live) = a.take_batch(&client, false).await.unwrap();
    assert_eq!((granted, live), (10, 1), "the burst, one member");
    let (granted, wait_us, live) = b.take_batch(&client, false).await.unwrap();
    assert_eq!(live, 2, "both members live");
    // At 1,000/s a permit accrues each millisecond between the two calls (CI
    // once saw 6 ms there, and 6 permits): the burst itself must not repeat.
    let accrued = 1 + around.elapsed().as_millis() as u64;
    assert!(
        granted <= accrued,
        "the burst is spent: {granted} more granted at once ({accrued} accrued)"
    );
    if granted == 0 {
        assert!(wait_us > 0 && wait_us <= 1_000, "wait {wait_us} µs");
    }
    // Coming back from the fallback: one permit, no burst, although the
    // limit has been idle (fresh keys).
    let fresh = unique("ratescript-resume");
    let c = RateLimiter::new(1000, 10, Some(client.clone()), &fresh, "c");
    let (granted, _, _) = c.take_batch(&client, true).await.unwrap();
    assert_eq!(granted, 1, "no burst on resume");

    // A pause from a: b is told to wait for it (Redis time).
    a.pause_group(Duration::from_secs(30));
    wait_until(Duration::from_secs(10), "b sees the group's pause", || {
        let b = b.clone();
        let client = client.clone();
        let r = tokio::task::block_in_place(|| {
            tokio::runtime::Handle::current().block_on(b.take_batch(&client, false))
        });
        matches!(r, Ok((0, w, _)) if w > 20_000_000)
    })
    .await;
    let _: i64 = client
        .del(vec![
            format!("{{{prefix}}}:rate:tat"),
            format!("{{{prefix}}}:rate:not-before"),
            format!("{{{prefix}}}:rate:members"),
            format!("{{{fresh}}}:rate:tat"),
            format!("{{{fresh}}}:rate:members"),
        ])
        .await
        .unwrap_or(0);
}

/// One answer from Redis later than the command timeout, Redis still
/// connected (a busy host, a long-running command of someone else's): the
/// limiter asks once more instead of taking its local share, which the
/// instances still on Redis do not count (CI saw 633 requests in a second at
/// 500/s when one instance's call timed out once). A proxy in front of the
/// real Redis holds its answer to the first script call until a second one is
/// sent: with the retry that is at once; without it, the instance falls back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_late_redis_answer_does_not_switch_to_the_local_share() {
    let _one = ONE_AT_A_TIME.lock().await;
    use courier::delivery::ratelimit::{RateLimiter, Source};
    use fred::prelude::*;
    let s = services();
    let redis_addr = s
        .redis_url
        .trim_start_matches("redis://")
        .trim_end_matches('/')
        .to_string();
    let proxy = HoldFirstAnswer::start(&redis_addr).await;
    let client = Builder::from_config(
        Config::from_url(&format!("redis://{}", proxy.addr)).expect("proxy URL"),
    )
    .with_performance_config(|pc| pc.default_command_timeout = Duration::from_millis(300))
    .build()
    .expect("client");
    client.init().await.expect("Redis through the proxy");
    let prefix = unique("ratelate");
    let limiter = RateLimiter::new(1000, 10, Some(client.clone()), &prefix, "a");
    tokio::time::timeout(Duration::from_secs(20), limiter.acquire())
        .await
        .expect("a permit");
    assert_eq!(
        proxy.script_calls(),
        2,
        "the late answer's call was made again"
    );
    assert_eq!(
        limiter.source().await,
        Source::Redis,
        "one late answer is not an outage: permits still come from the group's limit"
    );
    let _: i64 = client
        .del(vec![
            format!("{{{prefix}}}:rate:tat"),
            format!("{{{prefix}}}:rate:not-before"),
            format!("{{{prefix}}}:rate:members"),
        ])
        .await
        .unwrap_or(0);
}

/// A TCP proxy to Redis that holds every byte Redis sends after the first
/// `EVALSHA` until the client has sent a second one: one late answer, on
/// demand, from the real server.
struct HoldFirstAnswer {
    addr: std::net::SocketAddr,
    calls: tokio::sync::watch::Receiver<usize>,
}

impl HoldFirstAnswer {
    async fn start(upstream: &str) -> HoldFirstAnswer {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind");
        let addr = listener.local_addr().expect("addr");
        let (tx, calls) = tokio::sync::watch::channel(0usize);
        let tx = std::sync::Arc::new(tx);
        let upstream = upstream.to_string();
        tokio::spawn(async move {
            while let Ok((client, _)) = listener.accept().await {
                let Ok(server) = tokio::net::TcpStream::connect(&upstream).await else {
                    continue;
                };
                let (mut cr, mut cw) = client.into_split();
                let (mut sr, mut sw) = server.into_split();
                let mut calls = tx.subscribe();
                let tx = tx.clone();
                tokio::spawn(async move {
                    let mut buf = vec![0u8; 64 * 1024];
                    while let Ok(n) = cr.read(&mut buf).await {
                        if n == 0 {
                            break;
                        }
                        let seen = buf[..n].windows(7).filter(|w| w == b"EVALSHA").count();
                        if seen > 0 {
                            tx.send_modify(|c| *c += seen);
                        }
                        if sw.write_all(&buf[..n]).await.is_err() {
                            break;
                        }
                    }
                });
                tokio::spawn(async move {
                    let mut buf = vec![0u8; 64 * 1024];
                    while let Ok(n) = sr.read(&mut buf).await {
                        if n == 0 {
                            break;
                        }
                        // The first script call's answer (and anything after
                        // it) waits for the second call.
                        if *calls.borrow_and_update() == 1
                            && calls.wait_for(|&c| c >= 2).await.is_err()
                        {
                            break;
                        }
                        if cw.write_all(&buf[..n]).await.is_err() {
                            break;
                        }
                    }
                });
            }
        });
        HoldFirstAnswer { addr, calls }
    }

    fn script_calls(&self) -> usize {
        *self.calls.borrow()
    }
}

/// Keys the limiter did not write as it writes them — the group's pause and
/// the TAT an hour ahead, without a TTL (set by hand) or with a day's (the
/// Redis host's clock stepped back) — against the real Redis: they used to
/// hold every caller for the hour. Now they are ignored and reset: permits
/// are granted at once, the bogus pause is gone, and a real pause still holds.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rate_limit_keys_without_ttl_do_not_stall_the_group() {
    let _one = ONE_AT_A_TIME.lock().await;
    use courier::delivery::ratelimit::RateLimiter;
    use fred::prelude::*;
    use std::sync::Arc;
    let s = services();
    let client = Builder::from_config(Config::from_url(&s.redis_url).unwrap())
        .build()
        .unwrap();
    client.init().await.expect("Redis");
    let hour_ahead = || async {
        let now: i64 = client
            .eval(
                "local t = redis.call('TIME') return tonumber(t[1]) * 1000000 + tonumber(t[2])",
                Vec::<String>::new(),
                Vec::<String>::new(),
            )
            .await
            .unwrap();
        (now + 3_600_000_000).to_string()
    };
    let keys = |prefix: &str| {
        (
            format!("{{{prefix}}}:rate:tat"),
            format!("{{{prefix}}}:rate:not-before"),
            format!("{{{prefix}}}:rate:members"),
        )
    };
    // Each case on fresh keys: its first batch is the burst, unless a key
    // holds it.
    for (case, ttl) in [
        ("pause", None),
        ("pause", Some(Expiration::PX(86_400_000))),
        ("tat", None),
    ] {
        let prefix = unique("ratestale");
        let (tat, nb, members) = keys(&prefix);
        let key = if case == "tat" { &tat } else { &nb };
        let v = hour_ahead().await;
        let _: () = client
            .set(key.as_str(), v, ttl.clone(), None, false)
            .await
            .unwrap();
        let limiter = RateLimiter::new(1000, 10, Some(client.clone()), &prefix, "a");
        let (granted, wait_us, _) = limiter.take_batch(&client, false).await.unwrap();
        assert_eq!(
            granted,
            10,
            "{key} an hour ahead, TTL {ttl:?}: the burst expected, told to wait {} s",
            wait_us / 1_000_000
        );
        let left: i64 = client.exists(nb.as_str()).await.unwrap();
        assert_eq!(left, 0, "the untrusted pause is deleted");
        let _: i64 = client.del(vec![tat, nb, members]).await.unwrap_or(0);
    }
    let prefix = unique("ratestale");
    let (tat, nb, _) = keys(&prefix);
    let limiter = Arc::new(RateLimiter::new(
        1000,
        10,
        Some(client.clone()),
        &prefix,
        "a",
    ));
    // A caller is not held either.
    let _: () = client
        .set(nb.as_str(), hour_ahead().await, None, None, false)
        .await
        .unwrap();
    tokio::time::timeout(Duration::from_secs(20), limiter.acquire())
        .await
        .expect("a permit, not an hour's wait");
    // A pause Courier sets itself (with its TTL) still holds the group.
    limiter.pause_group(Duration::from_secs(30));
    wait_until(
        Duration::from_secs(10),
        "the real pause is honoured",
        || {
            let (l, c) = (limiter.clone(), client.clone());
            let r = tokio::task::block_in_place(|| {
                tokio::runtime::Handle::current().block_on(l.take_batch(&c, false))
            });
            matches!(r, Ok((0, w, _)) if w > 20_000_000)
        },
    )
    .await;
    let _: i64 = client
        .del(vec![tat, nb, format!("{{{prefix}}}:rate:members")])
        .await
        .unwrap_or(0);
}

/// Issue 14: "never a burst above the limit when Redis returns". Two instances
/// share `rate_limit_per_sec = 500` through the real Redis; Redis is stopped
/// (each instance falls back to its local share, 250/s) and started again
/// (empty: no persistence, the members and the TAT are gone). In no whole second
/// does the API see more than the limit + its burst (+ 5 % for where the
/// seconds fall), before, during or after, and while Redis is down no whole
/// second falls below 0.6 × the rate reached through Redis before (never a
/// stall); the per-second table is
/// printed with the phases. Ends with the audit.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_burst_above_the_limit_when_redis_returns() {
    let _one = ONE_AT_A_TIME.lock().await;
    const RATE: u64 = 500;
    const BURST: u64 = 5;
    let mut redis = OwnRedis::start();
    let s = redis.services(&services());
    let n = Names::new("rate-return", 6);
    n.create(&s, true).await;
    let api = api_with_latency(5).await;
    let sink_t0 = std::time::Instant::now();
    let second = || sink_t0.elapsed().as_secs();
    let toml = base_toml(&n, &api.url()).replacen(
        "\n[api]\n",
        &format!("\n[api]\nrate_limit_per_sec = {RATE}\nrate_limit_burst = {BURST}\n"),
        1,
    );
    let mut a = Courier::start(&format!("{}-a", n.topic), &s, &toml);
    let mut b = Courier::start(&format!("{}-b", n.topic), &s, &toml);
    let both = |name: &str, pred: &dyn Fn(f64) -> bool| {
        pred(block(a.metric(name))) && pred(block(b.metric(name)))
    };
    wait_until(Duration::from_secs(90), "both hold partitions", || {
        both("courier_assigned_partitions", &|v| v > 0.0)
    })
    .await;
    let spec = Spec {
        count: 14_000,
        keys: 14_000,
        id_prefix: "rate-return".into(),
        ..Spec::default()
    };
    let produced = loadgen::produce(&s.brokers, &n.topic, &spec).await.unwrap();
    wait_until(Duration::from_secs(60), "deliveries through Redis", || {
        api.delivered_count() > 1_500
    })
    .await;
    let fallback = "courier_api_rate_limit_per_sec{scope=\"local_fallback\"";
    let stopped_at = second();
    redis.stop();
    wait_until(Duration::from_secs(30), "both on their local share", || {
        both(fallback, &|v| v > 0.0)
    })
    .await;
    // A few seconds on the fallback (counted in deliveries, not slept).
    let at = api.delivered_count();
    wait_until(
        Duration::from_secs(60),
        "deliveries on the fallback",
        || api.delivered_count() > at + 1_500,
    )
    .await;
    let started_at = second();
    redis.start_again();
    wait_until(Duration::from_secs(60), "both back on Redis", || {
        both(fallback, &|v| v == 0.0)
    })
    .await;
    let back_at = second();
    n.wait_committed_to_end(&s, Duration::from_secs(240)).await;
    assert_eq!(a.terminate(Duration::from_secs(30)).await, Some(0));
    assert_eq!(b.terminate(Duration::from_secs(30)).await, Some(0));

    let audit = api.audit();
    println!(
        "Redis stopped in second {stopped_at}, started in second {started_at}, both back on it by second {back_at}"
    );
    println!("second | API requests | phase");
    for (i, &count) in audit.per_second.iter().enumerate() {
        let i = i as u64;
        let phase = if i < stopped_at {
            "redis"
        } else if i < started_at {
            "redis down: local shares"
        } else if i <= back_at {
            "redis back: rejoining"
        } else {
            "redis"
        };
        println!("{i:>6} | {count:>12} | {phase}");
    }
    assert_per_second_within(&audit, RATE, BURST);
    // Never a stall: the whole seconds with Redis down (not the ones it went
    // down or came back in) carry both local shares, well above one of them —
    // of the rate the two reached through Redis in this run (a loaded machine
    // delivers less than the limit in every phase; seen: 400–450/s of 500).
    let through_redis: Vec<u64> = audit
        .per_second
        .iter()
        .take(stopped_at as usize)
        .copied()
        .filter(|&c| c > 0)
        .skip(1) // the second delivery began in
        .collect();
    let reached = if through_redis.is_empty() {
        RATE
    } else {
        let mut v = through_redis.clone();
        v.sort_unstable();
        v[v.len() / 2].min(RATE)
    };
    for i in stopped_at + 1..started_at {
        let count = audit.per_second.get(i as usize).copied().unwrap_or(0);
        assert!(
            count as f64 >= 0.6 * reached as f64,
            "second {i}, Redis down: {count} requests (shares: {RATE}/s in all; {reached}/s reached through Redis)"
        );
    }
    let rep = n.audit(&s, &produced, &api);
    assert_no_loss("rate-return", &rep);
}

/// Every whole second at the API stays within `rate + burst` (+ 5 % for the
/// second boundaries), and the limit binds: the busiest second is at least half
/// the rate (else the bound would hold vacuously).
fn assert_per_second_within(audit: &courier_standins::sink::Audit, rate: u64, burst: u64) {
    let bound = (rate + burst) as f64 * 1.05;
    for (second, &count) in audit.per_second.iter().enumerate() {
        assert!(
            count as f64 <= bound,
            "second {second}: {count} requests (limit {rate}/s + burst {burst}, + 5 %)"
        );
    }
    assert!(
        audit.peak_rps() >= rate / 2,
        "peak {} requests/s: the limit was never reached",
        audit.peak_rps()
    );
}
