//! The `hostile` drill (issue 23): what a broker, an operator or one record does
//! to a running three-instance group under load —
//!
//! 1. `hostile-403`: 20 events of one tenant (one key) answered 403 among the
//!    others: the others keep flowing, the 20 reach the DLQ or the parking lot
//!    within 60 s;
//! 2. `hostile-header`: records whose header *name* is not UTF-8 (`kcat -H
//!    $'\xff=x'`): delivered, no panic, no exit;
//! 3. `hostile-recreate`: the main topic deleted and created again while the
//!    group runs (the load held meanwhile, the old topic read to its end): every
//!    event of the new topic delivered, nothing reported deleted unread;
//! 4. `hostile-deleted`: the group stopped, events produced meanwhile, half of
//!    them deleted unread (`kafka-delete-records` above the committed
//!    positions), the group started again: Courier's ERROR lines and
//!    `courier_events_deleted_unread_total` name exactly that count.
//!
//! `hostile` runs all four in that order. The audit accounts for what the drill
//! itself deleted: an event that is neither delivered, in the DLQ nor parked is
//! *deleted unread* when its offset lies in a range the drill deleted (above
//! the group's committed position at the deletion), and lost otherwise; Courier
//! must report every deleted-unread event, so that produced = delivered + DLQ +
//! parked + Courier's `courier_events_deleted_unread_total`.

use crate::cluster::{delete_records, recreate_topic, Cluster, Load};
use crate::opts::Opts;
use crate::report::Check;
use anyhow::{bail, Context as _};
use courier::kafka::admin::{committed_offsets, end_offsets};
use courier_standins::audit::{AuditReport, Produced};
use courier_standins::sink::FailRule;
use std::collections::{HashMap, HashSet};
use std::time::{Duration, Instant};

/// The parts, each selectable on its own (`--scenario hostile-403`); `hostile`
/// runs them all.
pub const PARTS: &[&str] = &[
    "hostile-403",
    "hostile-header",
    "hostile-recreate",
    "hostile-deleted",
];

/// Events of the tenant whose permissions the API revoked, each its own key
/// (`tenant-revoked-<i>`: the tenant's entities), so they spread over the
/// partitions and instances as the 20 among 2,000 do.
const TENANT_EVENTS: usize = 20;
const TENANT_KEY: &str = "tenant-revoked";
/// Records with a non-UTF-8 header name.
const HEADER_RECORDS: usize = 3;
/// The deadline the issue gives the 403 events to leave the way.
const OUT_OF_THE_WAY: Duration = Duration::from_secs(60);

pub fn parts(name: &str) -> Vec<&'static str> {
    match name {
        "hostile" => PARTS.to_vec(),
        n => PARTS.iter().copied().filter(|p| *p == n).collect(),
    }
}

/// How long the load may run at most: the scenario stops it when its parts are done.
pub fn load_duration(o: &Opts) -> Duration {
    o.pick(240.0, 600.0)
}

/// An event the drill produced outside the load (its own key or headers).
#[derive(Debug, Clone)]
struct Special {
    id: String,
    partition: i32,
    /// -1 when unknown (kcat does not say).
    offset: i64,
    incarnation: usize,
}

/// What the parts did that the final accounting needs.
#[derive(Debug, Default)]
pub struct Book {
    /// Index in the load's `Produced::ids` where each new incarnation of the
    /// main topic begins (one per recreation).
    boundaries: Vec<usize>,
    /// Per incarnation deleted with the topic: the group's committed offsets and
    /// the end offsets just before the deletion.
    deleted_topic: Vec<(Vec<i64>, Vec<i64>)>,
    /// Courier's deleted-unread count before the recreation and after the new
    /// topic's events flowed.
    reported_around_recreate: Option<(f64, f64)>,
    /// delete-records: the incarnation and, per partition, the deleted range of
    /// unread offsets [committed, new log start).
    cut: Option<(usize, Vec<(i64, i64)>)>,
    /// Courier's count before the group was started again after the cut.
    reported_before_cut: f64,
    specials: Vec<Special>,
}

impl Book {
    fn incarnation(&self) -> usize {
        self.boundaries.len()
    }

    /// The events the drill produced outside the load, for the audit.
    pub fn special_produced(&self) -> Produced {
        Produced {
            ids: self.specials.iter().map(|s| s.id.clone()).collect(),
            offsets: self
                .specials
                .iter()
                .map(|s| (s.partition, s.offset))
                .collect(),
            poison: Vec::new(),
        }
    }
}

pub async fn run(
    name: &str,
    c: &mut Cluster,
    o: &Opts,
    load: &Load,
    book: &mut Book,
) -> anyhow::Result<Vec<Check>> {
    let mut checks = Vec::new();
    tokio::time::sleep(o.warm()).await;
    for part in parts(name) {
        eprintln!("[drill] ─── {part}");
        c.reap()?;
        match part {
            "hostile-403" => tenant_403(c, o, load, book, &mut checks).await?,
            "hostile-header" => header(c, o, book, &mut checks).await?,
            "hostile-recreate" => recreate(c, o, load, book, &mut checks).await?,
            "hostile-deleted" => deleted(c, o, load, book, &mut checks).await?,
            _ => bail!("unknown part {part}"),
        }
    }
    tokio::time::sleep(o.tail()).await;
    load.stop();
    Ok(checks)
}

/// Event ids found in `topic`'s envelopes (the DLQ or the parking lot).
fn envelope_ids(brokers: &str, topic: &str) -> anyhow::Result<HashSet<String>> {
    let recs = tokio::task::block_in_place(|| courier_standins::admin::read_all(brokers, topic))?;
    Ok(recs
        .iter()
        .filter_map(|r| r.payload.as_deref())
        .filter_map(|p| courier::core::envelope::Envelope::from_bytes(p).ok())
        .filter_map(|e| e.event_id)
        .collect())
}

/// Produces `ids` with `key` (and `headers`, raw name/value bytes) through kcat
/// when a header name is not UTF-8 (rdkafka's producer takes `&str` names),
/// through rdkafka otherwise.
/// The Kafka key of special records: one for all, or `<prefix>-<i>` each.
#[derive(Clone, Copy)]
enum Key<'a> {
    One(&'a str),
    PerEvent(&'a str),
}

async fn produce_specials(
    c: &Cluster,
    ids: &[String],
    key: Key<'_>,
    raw_headers: Option<&[(&[u8], &[u8])]>,
    book: &mut Book,
) -> anyhow::Result<()> {
    let topic = &c.names.topic;
    match raw_headers {
        None => {
            use rdkafka::producer::FutureRecord;
            let producer = courier_standins::loadgen::producer_with_timeout(
                &c.svc.brokers,
                Duration::from_secs(60),
            )?;
            for (i, id) in ids.iter().enumerate() {
                let key = match key {
                    Key::One(k) => k.to_string(),
                    Key::PerEvent(p) => format!("{p}-{i}"),
                };
                let body =
                    courier_standins::loadgen::event_json(id, "tenant.updated", &key, i, 300);
                let (partition, offset) = producer
                    .send(
                        FutureRecord::to(topic).key(&key).payload(&body),
                        Duration::from_secs(60),
                    )
                    .await
                    .map(|d| (d.partition, d.offset))
                    .map_err(|(e, _)| anyhow::anyhow!("producing {id}: {e}"))?;
                book.specials.push(Special {
                    id: id.clone(),
                    partition,
                    offset,
                    incarnation: book.incarnation(),
                });
            }
        }
        Some(headers) => {
            use std::ffi::OsStr;
            use std::os::unix::ffi::OsStrExt as _;
            let key = match key {
                Key::One(k) => k,
                Key::PerEvent(_) => bail!("kcat produces its records with one key"),
            };
            let mut cmd = tokio::process::Command::new("kcat");
            cmd.args(["-P", "-b", &c.svc.brokers, "-t", topic, "-k", key]);
            for (n, v) in headers {
                let mut h = n.to_vec();
                h.push(b'=');
                h.extend_from_slice(v);
                cmd.arg("-H").arg(OsStr::from_bytes(&h));
            }
            let mut input = Vec::new();
            for (i, id) in ids.iter().enumerate() {
                input.extend(courier_standins::loadgen::event_json(
                    id,
                    "header.odd",
                    key,
                    i,
                    300,
                ));
                input.push(b'\n');
            }
            cmd.stdin(std::process::Stdio::piped())
                .stdout(std::process::Stdio::piped())
                .stderr(std::process::Stdio::piped());
            let mut child = cmd
                .spawn()
                .context("running kcat (scripts/services.sh up installs it)")?;
            if let Some(mut stdin) = child.stdin.take() {
                use tokio::io::AsyncWriteExt as _;
                stdin.write_all(&input).await?;
            }
            let out = tokio::time::timeout(Duration::from_secs(60), child.wait_with_output())
                .await
                .context("kcat did not finish within 60 s")??;
            let err = String::from_utf8_lossy(&out.stderr);
            if !out.status.success() || err.contains("ERROR") || err.contains("Failed") {
                bail!("kcat failed ({}): {err}", out.status);
            }
            for id in ids {
                book.specials.push(Special {
                    id: id.clone(),
                    partition: -1,
                    offset: -1,
                    incarnation: book.incarnation(),
                });
            }
        }
    }
    Ok(())
}

async fn tenant_403(
    c: &mut Cluster,
    o: &Opts,
    load: &Load,
    book: &mut Book,
    checks: &mut Vec<Check>,
) -> anyhow::Result<()> {
    let ids: Vec<String> = (0..TENANT_EVENTS)
        .map(|i| format!("drill-{}-t403-{i}", c.names.topic))
        .collect();
    // The API refuses this tenant's events with 403, forever (its permissions
    // were revoked); everything else is answered as before.
    c.sink.update_behaviour(|b| {
        for id in &ids {
            b.fail_ids.insert(
                id.clone(),
                FailRule {
                    status: 403,
                    times: None,
                    retry_after_s: None,
                },
            );
        }
    });
    let acked0 = load.acked();
    let delivered0 = c.sink.delivered_count();
    let t0 = Instant::now();
    produce_specials(c, &ids, Key::PerEvent(TENANT_KEY), None, book).await?;
    eprintln!("[drill] {TENANT_EVENTS} events of {TENANT_KEY} produced; the API answers them 403");
    let window = o.pick(10.0, 30.0);
    let mut flow: Option<(u64, usize)> = None;
    let mut out_at: Option<(Duration, usize, usize)> = None;
    while t0.elapsed() < OUT_OF_THE_WAY.max(window) {
        if out_at.is_none() {
            let dlq = envelope_ids(&c.svc.brokers, &c.names.dlq)?;
            let parked = envelope_ids(&c.svc.brokers, &c.names.parking)?;
            let in_dlq = ids.iter().filter(|i| dlq.contains(*i)).count();
            let in_parking = ids
                .iter()
                .filter(|i| parked.contains(*i) && !dlq.contains(*i))
                .count();
            if in_dlq + in_parking == ids.len() {
                out_at = Some((t0.elapsed(), in_dlq, in_parking));
            }
        }
        if flow.is_none() && t0.elapsed() >= window {
            flow = Some((
                c.sink.delivered_count().saturating_sub(delivered0),
                load.acked().saturating_sub(acked0),
            ));
        }
        if out_at.is_some() && flow.is_some() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    checks.push(Check::new(
        "403-out-of-the-way",
        out_at.is_some(),
        match out_at {
            Some((d, dlq, parked)) => format!(
                "the {TENANT_EVENTS} events answered 403 were in the DLQ ({dlq}) or parked ({parked}) {:.1} s after they were produced (limit {} s)",
                d.as_secs_f64(),
                OUT_OF_THE_WAY.as_secs()
            ),
            None => format!(
                "the {TENANT_EVENTS} events answered 403 were not all in the DLQ or the parking lot {} s after they were produced",
                OUT_OF_THE_WAY.as_secs()
            ),
        },
    ));
    // The tenant's permissions are restored: the next parts start from a
    // pipeline this one did not stall (each part's checks name its own
    // failures), and the DLQ drain delivers what waits there.
    c.sink.update_behaviour(|b| {
        for id in &ids {
            b.fail_ids.remove(id);
        }
    });
    let (delivered, produced) = flow.unwrap_or((0, 0));
    let ratio = delivered as f64 / produced.max(1) as f64;
    checks.push(Check::new(
        "403-others-flow",
        produced > 0 && ratio >= 0.5,
        format!(
            "in the {:.0} s after the 403 events: {delivered} other events delivered for {produced} produced ({ratio:.2}; at least 0.5: one tenant must not stop the others)",
            window.as_secs_f64()
        ),
    ));
    Ok(())
}

async fn header(
    c: &mut Cluster,
    o: &Opts,
    book: &mut Book,
    checks: &mut Vec<Check>,
) -> anyhow::Result<()> {
    let ids: Vec<String> = (0..HEADER_RECORDS)
        .map(|i| format!("drill-{}-hdr-{i}", c.names.topic))
        .collect();
    let exits0 = c.unexpected_exits.len();
    // A header name that is not UTF-8 next to an ordinary one (one key: the
    // records land on one partition, i.e. one instance's poll thread).
    let headers: [(&[u8], &[u8]); 2] = [(b"\xff\xfe", b"x"), (b"tenant", b"t1")];
    produce_specials(c, &ids, Key::One("odd-headers"), Some(&headers), book).await?;
    eprintln!("[drill] {HEADER_RECORDS} records with the header name 0xff 0xfe produced (kcat)");
    let t0 = Instant::now();
    let deadline = o.pick(30.0, 60.0);
    let mut delivered_at = None;
    while t0.elapsed() < deadline {
        c.reap()?;
        let a = c.sink.audit();
        if ids.iter().all(|i| a.delivered.contains_key(i)) {
            delivered_at = Some(t0.elapsed());
            break;
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    checks.push(Check::new(
        "odd-header-delivered",
        delivered_at.is_some(),
        match delivered_at {
            Some(d) => format!(
                "the {HEADER_RECORDS} records with a non-UTF-8 header name delivered after {:.1} s",
                d.as_secs_f64()
            ),
            None => format!(
                "the {HEADER_RECORDS} records with a non-UTF-8 header name were not delivered within {:.0} s",
                deadline.as_secs_f64()
            ),
        },
    ));
    let panics: Vec<String> = c
        .instances
        .iter()
        .flat_map(|i| {
            let text = std::fs::read_to_string(&i.log).unwrap_or_default();
            text.lines()
                .filter(|l| l.contains("panicked"))
                .map(|l| format!("{}: {}", i.name, courier_testkit::strip_ansi(l)))
                .collect::<Vec<_>>()
        })
        .collect();
    let exits = c.unexpected_exits[exits0..].to_vec();
    checks.push(Check::new(
        "odd-header-no-panic",
        panics.is_empty() && exits.is_empty(),
        if panics.is_empty() && exits.is_empty() {
            "no panic logged, no instance exited".to_string()
        } else {
            format!(
                "{} panic line(s) {:?}; instances exited on their own: {exits:?}",
                panics.len(),
                panics.iter().take(3).collect::<Vec<_>>()
            )
        },
    ));
    Ok(())
}

async fn recreate(
    c: &mut Cluster,
    o: &Opts,
    load: &Load,
    book: &mut Book,
    checks: &mut Vec<Check>,
) -> anyhow::Result<()> {
    let n = c.names.clone();
    let b = c.svc.brokers.clone();
    // The load holds while the topic is purged, so that every produced event
    // belongs to a known incarnation of the topic.
    let boundary = load.hold(Duration::from_secs(120)).await?;
    // Once the group has read the old topic to its end, nothing of it is unread:
    // Courier cannot know of events of a deleted topic it never fetched, so a
    // purge with unread events has no exact count to check (hostile-deleted
    // checks the exact count of events deleted unread).
    let t0 = Instant::now();
    let (committed, ends) = loop {
        let (committed, ends) = tokio::task::block_in_place(|| {
            Ok::<_, anyhow::Error>((
                committed_offsets(&b, &n.group, &n.topic, n.partitions)?,
                end_offsets(&b, &n.topic, n.partitions)?,
            ))
        })?;
        if committed == ends || t0.elapsed() > o.pick(30.0, 60.0) {
            break (committed, ends);
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    let before = c.deleted_unread_reported().await;
    let unread: i64 = committed
        .iter()
        .zip(&ends)
        .map(|(c, e)| e - (*c).max(0))
        .sum();
    eprintln!(
        "[drill] deleting and creating {} again ({} events produced so far; {unread} not yet committed)",
        n.topic, boundary
    );
    let took = recreate_topic(&b, &n.topic, n.partitions, Duration::from_secs(60)).await?;
    book.boundaries.push(boundary);
    book.deleted_topic.push((committed, ends));
    load.resume(true);
    eprintln!(
        "[drill] {} recreated after {:.1} s; the load goes on",
        n.topic,
        took.as_secs_f64()
    );
    // The first events of the new topic must reach the API.
    let first = o.rate as usize * 2;
    let want: Vec<String> = (boundary..boundary + first)
        .map(|seq| courier_standins::loadgen::event_id(&format!("drill-{}", c.scenario()), seq))
        .collect();
    let t0 = Instant::now();
    let deadline = o.pick(60.0, 120.0);
    let mut flowing = None;
    let mut missing = want.len();
    while t0.elapsed() < deadline {
        c.reap()?;
        if load.acked() >= boundary + first {
            let a = c.sink.audit();
            missing = want
                .iter()
                .filter(|i| !a.delivered.contains_key(*i))
                .count();
            if missing == 0 {
                flowing = Some(t0.elapsed());
                break;
            }
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    checks.push(Check::new(
        "recreated-topic-flows",
        flowing.is_some(),
        match flowing {
            Some(d) => format!(
                "the first {first} events of the recreated topic delivered {:.1} s after it was created",
                d.as_secs_f64()
            ),
            None => format!(
                "{missing} of the first {first} events of the recreated topic not delivered {:.0} s after it was created",
                deadline.as_secs_f64()
            ),
        },
    ));
    let after = c.deleted_unread_reported().await;
    book.reported_around_recreate = Some((before, after));
    Ok(())
}

async fn deleted(
    c: &mut Cluster,
    o: &Opts,
    load: &Load,
    book: &mut Book,
    checks: &mut Vec<Check>,
) -> anyhow::Result<()> {
    let n = c.names.clone();
    let b = c.svc.brokers.clone();
    book.reported_before_cut = c.deleted_unread_reported().await;
    eprintln!("[drill] stopping the group (SIGTERM to every instance); the load goes on");
    let bad = c.stop_all().await;
    checks.push(Check::new(
        "deleted-stop",
        bad.is_empty(),
        if bad.is_empty() {
            "every instance exited 0 on SIGTERM".to_string()
        } else {
            format!("exits other than 0 on SIGTERM: {bad:?}")
        },
    ));
    let committed =
        tokio::task::block_in_place(|| committed_offsets(&b, &n.group, &n.topic, n.partitions))?;
    // Wait until a second's worth of events (at least) waits unread.
    let acked0 = load.acked();
    let t0 = Instant::now();
    let ends = loop {
        let ends = tokio::task::block_in_place(|| end_offsets(&b, &n.topic, n.partitions))?;
        let waiting: i64 = committed
            .iter()
            .zip(&ends)
            .filter(|(c, _)| **c >= 0)
            .map(|(c, e)| e - c)
            .sum();
        if waiting >= o.rate as i64 && load.acked() > acked0 {
            break ends;
        }
        if t0.elapsed() > Duration::from_secs(60) {
            bail!("no events arrived while the group was stopped ({waiting} unread after 60 s)");
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    // Half of what waits in each partition is deleted unread.
    let below: Vec<(i32, i64)> = committed
        .iter()
        .zip(&ends)
        .enumerate()
        .filter(|(_, (c, e))| **c >= 0 && **e - **c >= 2)
        .map(|(p, (c, e))| (p as i32, c + (e - c) / 2))
        .collect();
    let starts = delete_records(&b, &n.topic, &below).await?;
    let mut ranges: Vec<(i64, i64)> = vec![(0, 0); n.partitions as usize];
    for (p, start) in &starts {
        let from = committed[*p as usize];
        ranges[*p as usize] = (from, (*start).max(from));
    }
    let cut: i64 = ranges.iter().map(|(f, t)| t - f).sum();
    eprintln!(
        "[drill] delete-records: {cut} events deleted unread above the committed positions ({:?}); starting the group again",
        ranges
    );
    book.cut = Some((book.incarnation(), ranges));
    c.start_all().await?;
    // Courier reports on assignment: wait until it said so (or the deadline).
    let deadline = o.pick(30.0, 60.0);
    let t0 = Instant::now();
    while t0.elapsed() < deadline {
        let now = c.deleted_unread_reported().await - book.reported_before_cut;
        if now >= cut as f64 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    Ok(())
}

/// Σ of the counts Courier's "deleted unread" ERROR lines give in `text`
/// (`count=N` in the human format, `"count":N` in JSON), and the lines.
pub fn logged_deleted_unread(text: &str) -> (u64, Vec<String>) {
    let mut sum = 0;
    let mut lines = Vec::new();
    for raw in text.lines() {
        let l = courier_testkit::strip_ansi(raw);
        if !l.contains("ERROR") || !l.to_ascii_lowercase().contains("deleted unread") {
            continue;
        }
        let n = ["count=", "\"count\":"].iter().find_map(|k| {
            let at = l.find(k)? + k.len();
            let digits: String = l[at..].chars().take_while(|c| c.is_ascii_digit()).collect();
            digits.parse::<u64>().ok()
        });
        sum += n.unwrap_or(0);
        lines.push(l);
    }
    (sum, lines)
}

/// Where the events the audit found nowhere went, as far as the drill knows.
#[derive(Debug, Default)]
pub struct Accounting {
    /// Deleted with the main topic before the group read them.
    pub deleted_with_topic: usize,
    /// Deleted by the drill's delete-records before the group read them.
    pub deleted_records: usize,
    /// Deleted unread in all (the two above).
    pub deleted_unread: usize,
    /// Found nowhere and not deleted: lost.
    pub lost: Vec<String>,
}

/// Splits the audit's missing events into deleted-unread and lost, and checks
/// Courier's own accounting against it.
pub fn account(
    book: &Book,
    load: &Produced,
    audit: &AuditReport,
    reported_total: f64,
    logs: &str,
) -> (Accounting, Vec<Check>) {
    let mut where_: HashMap<&str, (usize, i32, i64)> = HashMap::new();
    for (i, id) in load.ids.iter().enumerate() {
        let inc = book.boundaries.iter().filter(|b| i >= **b).count();
        let (p, o) = load.offsets.get(i).copied().unwrap_or((-1, -1));
        where_.insert(id.as_str(), (inc, p, o));
    }
    for s in &book.specials {
        where_.insert(s.id.as_str(), (s.incarnation, s.partition, s.offset));
    }
    let mut acc = Accounting::default();
    let mut lost_new = 0;
    for id in &audit.lost {
        let Some(&(inc, p, o)) = where_.get(id.as_str()) else {
            acc.lost.push(id.clone());
            continue;
        };
        let pi = p.max(0) as usize;
        if let Some((committed, _)) = book.deleted_topic.get(inc) {
            // Its topic was deleted: unread if at or above the committed position.
            if p >= 0 && committed.get(pi).is_some_and(|c| o >= *c) {
                acc.deleted_with_topic += 1;
                continue;
            }
        } else if let Some((cinc, ranges)) = &book.cut {
            if *cinc == inc && p >= 0 && ranges.get(pi).is_some_and(|(f, t)| o >= *f && o < *t) {
                acc.deleted_records += 1;
                continue;
            }
        }
        if inc > 0 && inc == book.incarnation() {
            lost_new += 1;
        }
        acc.lost.push(id.clone());
    }
    acc.deleted_unread = acc.deleted_with_topic + acc.deleted_records;
    let mut checks = Vec::new();
    if let Some((before, after)) = book.reported_around_recreate {
        let reported = after - before;
        let bound: i64 = book
            .deleted_topic
            .iter()
            .flat_map(|(c, e)| c.iter().zip(e).map(|(c, e)| e - (*c).max(0)))
            .sum();
        let g = acc.deleted_with_topic as f64;
        checks.push(Check::new(
            "recreate-accounted",
            reported >= g && reported <= bound as f64 && lost_new == 0,
            format!(
                "{lost_new} events of the recreated topic lost; the old topic's unread events: {} found nowhere, Courier reported {reported:.0} (must lie in [{}, {bound}]: {bound} were above the committed positions at the deletion)",
                acc.deleted_with_topic, acc.deleted_with_topic
            ),
        ));
    }
    if let Some((_, ranges)) = &book.cut {
        let cut: i64 = ranges.iter().map(|(f, t)| t - f).sum();
        // The cut is the last part: everything Courier reported since the
        // group started again is about it.
        let reported = reported_total - book.reported_before_cut;
        let (logged, lines) = logged_deleted_unread(logs);
        let g = acc.deleted_records;
        // Courier counts what it has no record of: every event never
        // delivered, and also one the API answered after Courier stopped
        // listening (an answer later than the request timeout, or after the
        // stop's drain; at-least-once would have sent it again). So at least
        // the never-delivered, at most the whole cut, its ERROR lines the same.
        checks.push(Check::new(
            "deleted-unread-exact",
            reported >= g as f64 && reported <= cut as f64 && logged as f64 == reported,
            format!(
                "{cut} records deleted above the committed positions, {g} of them never delivered; Courier's courier_events_deleted_unread_total rose by {reported:.0} (must lie in [{g}, {cut}]; above {g}: delivered without Courier hearing the answer), its ERROR lines name {logged} ({} line(s){})",
                lines.len(),
                lines
                    .first()
                    .map(|l| format!(", e.g. {:?}", l.chars().take(300).collect::<String>()))
                    .unwrap_or_default()
            ),
        ));
    }
    let sum = audit.delivered + audit.in_dlq + audit.parked;
    // Courier's count may include events the API got (see above): the
    // identity holds with the drill's own count, and Courier's is at least it.
    checks.push(Check::new(
        "accounting",
        acc.lost.is_empty()
            && sum + acc.deleted_unread == audit.produced
            && reported_total >= acc.deleted_unread as f64,
        format!(
            "produced {} = delivered {} + DLQ {} + parked {} + deleted unread {} (Courier's deleted-unread count {reported_total:.0}, at least that; lost {})",
            audit.produced,
            audit.delivered,
            audit.in_dlq,
            audit.parked,
            acc.deleted_unread,
            acc.lost.len()
        ),
    ));
    (acc, checks)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_the_counts_of_deleted_unread_error_lines() {
        let text = "\u{1b}[2m2026-12-01T22:00:00Z\u{1b}[0m \u{1b}[31mERROR\u{1b}[0m courier::runtime: events deleted unread: the log now starts past offsets \u{1b}[3mtopic\u{1b}[0m\u{1b}[2m=\u{1b}[0mt \u{1b}[3mpartition\u{1b}[0m\u{1b}[2m=\u{1b}[0m2 \u{1b}[3mcount\u{1b}[0m\u{1b}[2m=\u{1b}[0m41
2026-12-01T22:00:01Z  WARN courier: events deleted unread count=7 (a warning: not counted)
{\"level\":\"ERROR\",\"fields\":{\"message\":\"events deleted unread: ...\",\"topic\":\"t\",\"partition\":3,\"count\":9}}
2026-12-01T22:00:02Z ERROR courier: something else count=100";
        let (n, lines) = logged_deleted_unread(text);
        assert_eq!(n, 50, "{lines:?}");
        assert_eq!(lines.len(), 2);
    }

    fn book_with_cut() -> Book {
        Book {
            cut: Some((0, vec![(10, 20), (0, 0)])),
            ..Book::default()
        }
    }

    #[test]
    fn deleted_ranges_are_not_lost_and_must_be_reported() {
        let load = Produced {
            ids: vec!["a".into(), "b".into(), "c".into()],
            offsets: vec![(0, 9), (0, 15), (1, 3)],
            poison: Vec::new(),
        };
        let audit = AuditReport {
            produced: 3,
            delivered: 1,
            lost: vec!["b".into(), "c".into()],
            ..AuditReport::default()
        };
        let logs = "x ERROR y: events deleted unread count=1";
        let (acc, checks) = account(&book_with_cut(), &load, &audit, 1.0, logs);
        // b (partition 0, offset 15) was deleted unread; c (partition 1) is lost.
        assert_eq!(acc.deleted_records, 1);
        assert_eq!(acc.lost, vec!["c".to_string()]);
        assert!(checks
            .iter()
            .any(|c| c.name == "deleted-unread-exact" && c.ok));
        assert!(checks.iter().any(|c| c.name == "accounting" && !c.ok));
        // Courier reporting nothing fails the exact count.
        let audit = AuditReport {
            lost: vec!["b".into()],
            delivered: 2,
            ..audit
        };
        let (_, checks) = account(&book_with_cut(), &load, &audit, 0.0, "");
        assert!(checks
            .iter()
            .any(|c| c.name == "deleted-unread-exact" && !c.ok));
        assert!(checks.iter().any(|c| c.name == "accounting" && !c.ok));
        let (_, checks) = account(&book_with_cut(), &load, &audit, 1.0, logs);
        assert!(checks.iter().all(|c| c.ok), "{checks:?}");
        // One more counted than never delivered (an event of the cut the API
        // got after Courier stopped listening): within the cut, still right.
        let two = "x ERROR y: events deleted unread count=2";
        let (_, checks) = account(&book_with_cut(), &load, &audit, 2.0, two);
        assert!(checks.iter().all(|c| c.ok), "{checks:?}");
        // More than the cut holds, or ERROR lines that disagree: wrong.
        let eleven = "x ERROR y: events deleted unread count=11";
        let (_, checks) = account(&book_with_cut(), &load, &audit, 11.0, eleven);
        assert!(checks
            .iter()
            .any(|c| c.name == "deleted-unread-exact" && !c.ok));
        let (_, checks) = account(&book_with_cut(), &load, &audit, 2.0, logs);
        assert!(checks
            .iter()
            .any(|c| c.name == "deleted-unread-exact" && !c.ok));
    }

    #[test]
    fn events_of_a_deleted_topic_count_from_the_committed_position() {
        let book = Book {
            boundaries: vec![2],
            deleted_topic: vec![(vec![5], vec![8])],
            reported_around_recreate: Some((0.0, 1.0)),
            ..Book::default()
        };
        let load = Produced {
            ids: vec!["old-a".into(), "old-b".into(), "new-a".into()],
            offsets: vec![(0, 4), (0, 6), (0, 0)],
            poison: Vec::new(),
        };
        let audit = AuditReport {
            produced: 3,
            lost: vec!["old-a".into(), "old-b".into(), "new-a".into()],
            ..AuditReport::default()
        };
        let (acc, checks) = account(&book, &load, &audit, 1.0, "");
        // old-a lay below the committed position: committed but never delivered.
        assert_eq!(acc.deleted_with_topic, 1);
        assert_eq!(acc.lost, vec!["old-a".to_string(), "new-a".to_string()]);
        assert!(checks
            .iter()
            .any(|c| c.name == "recreate-accounted" && !c.ok));
    }
}
