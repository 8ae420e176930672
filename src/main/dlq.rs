//! `courier dlq inspect` and `courier dlq replay`, with their progress bars.

use anyhow::Context;
use courier::config::LogFormat;

use crate::cli::DlqCmd;
use crate::exit::Exit;
use crate::load;
use crate::logging::init_logging;

/// Parses an RFC 3339 time or a duration ago (`90m`, `2h`) into ms since the epoch.
fn parse_time(s: &str) -> anyhow::Result<i64> {
    if let Ok(d) = humantime::parse_duration(s) {
        return Ok(courier::runtime::now_ms() - d.as_millis() as i64);
    }
    let t = humantime::parse_rfc3339_weak(s)
        .with_context(|| format!("`{s}` is neither an RFC 3339 time nor a duration"))?;
    Ok(t.duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as i64)
        .unwrap_or(0))
}

/// The records of `topic` now (its partitions' end minus start): what a scan
/// of it reads at most.
async fn source_records(kafka: &courier::config::KafkaConfig, topic: &str) -> anyhow::Result<u64> {
    let (k, t) = (kafka.clone(), topic.to_string());
    let snapshot =
        tokio::task::spawn_blocking(move || courier::kafka::admin::snapshot(&k, &t)).await??;
    Ok(snapshot
        .values()
        .map(|(lo, hi)| (hi - lo).max(0) as u64)
        .sum())
}

/// Awaits `work`, updating `progress`'s bar meanwhile (a terminal's).
async fn ticking<T>(
    progress: &courier::ops::progress::Progress,
    work: impl std::future::Future<Output = T>,
) -> T {
    tokio::pin!(work);
    let mut tick = tokio::time::interval(std::time::Duration::from_millis(100));
    loop {
        tokio::select! {
            out = &mut work => { progress.tick(); return out; }
            _ = tick.tick() => progress.tick(),
        }
    }
}

pub(crate) async fn dlq(cmd: DlqCmd) -> anyhow::Result<Exit> {
    use courier::ops::progress::{Follow, Progress, Stop};
    use courier::ops::{inspect, replay};
    use std::sync::atomic::Ordering;
    init_logging(LogFormat::Human, "warn");
    match cmd {
        DlqCmd::Inspect {
            config,
            parking,
            json,
            samples,
        } => {
            let cfg = load(&config)?;
            let topic = if parking {
                cfg.kafka.parking_topic()
            } else {
                cfg.kafka.dlq_topic()
            };
            cfg.kafka.secret_properties()?;
            let (k, t) = (cfg.kafka.clone(), topic.clone());
            // The DLQ is consumed by the group: what it read is below its
            // committed position. The parking lot is not: what was handled is
            // what the replay log lists.
            let group = (!parking).then(|| cfg.kafka.group_id.clone());
            let now = courier::runtime::now_ms();
            let stop = Stop::on_ctrl_c();
            let total = source_records(&cfg.kafka, &topic).await?;
            let progress = Progress::start("inspect", Some(total), Follow::Read);
            let (counts, stop2) = (progress.counts.clone(), stop.clone());
            let mut s = inspect::Summarizer::new(&t, now, samples).with_routes(&cfg.api);
            // Streamed: the summary keeps counts and samples, not the records.
            let s = tokio::task::spawn_blocking(move || {
                courier::kafka::admin::scan(&k, &t, |r| {
                    s.add(r.payload.as_deref());
                    counts.read.fetch_add(1, Ordering::Relaxed);
                    if stop2.asked() {
                        return std::ops::ControlFlow::Break(());
                    }
                    std::ops::ControlFlow::Continue(())
                })?;
                let mut s = s.finish();
                s.deleted = inspect::deleted_report(&k, &t, group.as_deref())?;
                Ok::<_, courier::kafka::admin::AdminError>(s)
            });
            let s = ticking(&progress, s).await??;
            let read = progress.finish().read;
            let mut s = s;
            let max = cfg.pipeline.max_event_bytes;
            s.decoded = inspect::decode_samples(&cfg.input, &s.samples, max).await;
            if json {
                println!("{}", serde_json::to_string_pretty(&s)?);
            } else {
                print!("{}", inspect::Table(&s, now));
            }
            if stop.asked() {
                eprintln!(
                    "interrupted (Ctrl-C): the summary covers the {read} of {total} records read"
                );
                return Ok(Exit::Interrupted);
            }
            Ok(Exit::Ok)
        }
        DlqCmd::Replay {
            config,
            from_dlq,
            reasons,
            types,
            keys,
            ids,
            since,
            until,
            dry_run,
            rate,
            yes,
        } => {
            let cfg = load(&config)?;
            let source = if from_dlq {
                cfg.kafka.dlq_topic()
            } else {
                cfg.kafka.parking_topic()
            };
            let filter = replay::Filter {
                reasons,
                types,
                keys,
                ids,
                since_ms: since.as_deref().map(parse_time).transpose()?,
                until_ms: until.as_deref().map(parse_time).transpose()?,
            };
            cfg.kafka.secret_properties()?;
            let stop = Stop::on_ctrl_c();
            let total = source_records(&cfg.kafka, &source).await?;
            let counting = Progress::start("replay (counting)", Some(total), Follow::Read);
            let prepare = replay::prepare(
                &cfg.kafka,
                &source,
                &filter,
                counting.counts.clone(),
                stop.clone(),
            );
            let plan = ticking(&counting, prepare).await?;
            counting.finish();
            if stop.asked() {
                println!("interrupted (Ctrl-C) while counting: nothing replayed");
                return Ok(Exit::Interrupted);
            }
            // Records deleted before they were handled cannot be replayed: said
            // (and logged) as the consumer says it.
            let (k, t, g) = (
                cfg.kafka.clone(),
                source.clone(),
                cfg.kafka.group_id.clone(),
            );
            let deleted = tokio::task::spawn_blocking(move || {
                inspect::deleted_report(&k, &t, from_dlq.then_some(g.as_str()))
            })
            .await??;
            for d in &deleted {
                println!(
                    "{source}[{}] offsets {}..{}: {} events deleted unread (retention or delete-records): they cannot be replayed",
                    d.partition, d.from, d.to, d.count
                );
            }
            println!(
                "{source}: {} to replay to {} ({} with the payload read back from the origin topic), {} already replayed, {} not matching, {} unreadable",
                plan.selected_count,
                cfg.kafka.topic,
                plan.payload_omitted,
                plan.already_replayed,
                plan.not_matching,
                plan.unreadable
            );
            if dry_run || plan.selected_count == 0 {
                for c in &plan.samples {
                    println!(
                        "  would replay {}/{} {}{}",
                        c.partition,
                        c.offset,
                        c.envelope.event_id.as_deref().unwrap_or("(no id)"),
                        if c.envelope.omitted.is_some() {
                            " (payload from the origin topic)"
                        } else {
                            ""
                        }
                    );
                }
                return Ok(Exit::Ok);
            }
            if !yes {
                use std::io::Write;
                print!(
                    "Replay {} events to {}? [y/N] ",
                    plan.selected_count, cfg.kafka.topic
                );
                std::io::stdout().flush()?;
                let read = tokio::task::spawn_blocking(|| {
                    let mut line = String::new();
                    std::io::stdin().read_line(&mut line).map(|_| line)
                });
                let line = tokio::select! {
                    line = read => line??,
                    _ = tokio::signal::ctrl_c() => String::new(),
                };
                if !matches!(line.trim(), "y" | "Y" | "yes") {
                    println!("nothing replayed");
                    return Ok(Exit::No);
                }
            }
            let writing =
                Progress::start("replay", Some(plan.selected_count as u64), Follow::Written);
            let execute = replay::execute(
                &cfg.kafka,
                &source,
                &cfg.kafka.topic,
                &filter,
                rate,
                writing.counts.clone(),
                stop.clone(),
            );
            let out = ticking(&writing, execute).await?;
            writing.finish();
            println!(
                "replayed {} events ({} with the payload read back from the origin topic)",
                out.replayed, out.payload_fetched
            );
            if out.interrupted {
                println!(
                    "interrupted (Ctrl-C) after {} of {} events: each one replayed is in the replay log; run the same command again to replay the rest",
                    out.replayed, plan.selected_count
                );
                return Ok(Exit::Interrupted);
            }
            if out.payload_unavailable.is_empty() {
                return Ok(Exit::Ok);
            }
            println!(
                "{} events NOT replayed: their payload is no longer in the origin topic",
                out.payload_unavailable.len()
            );
            for line in &out.payload_unavailable {
                println!("  {line}");
            }
            Ok(Exit::NotReplayable)
        }
    }
}
