//! Progress of the long operator commands (`courier dlq replay`, `dlq inspect`):
//! records read, matched and written, the rate and the time left. On a terminal
//! an `indicatif` bar on stderr; otherwise (a pipe, a CI log, `kubectl exec`
//! without a tty) one plain line on stderr every [`PLAIN_EVERY`]. stdout keeps
//! only the command's result (`--json` stays parseable).
//!
//! The counters are atomics: the blocking scan thread and the async writer
//! count, a reporter thread shows.

use std::io::IsTerminal as _;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// How often a plain progress line is written when stderr is not a terminal.
pub(crate) const PLAIN_EVERY: Duration = Duration::from_secs(2);

/// What one phase has done so far.
#[derive(Debug, Default)]
pub struct Counts {
    pub read: AtomicU64,
    pub matched: AtomicU64,
    pub written: AtomicU64,
}

/// A snapshot of [`Counts`], and what the rate and time left are made of.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Seen {
    pub read: u64,
    pub matched: u64,
    pub written: u64,
}

/// Which counter the rate and the time left follow.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Follow {
    /// Records read, out of the topic's records (inspect, a replay's count).
    Read,
    /// Events written, out of those selected (a replay).
    Written,
}

/// One phase's progress: what it is, the total it works toward, its counters.
pub struct Progress {
    what: String,
    total: Option<u64>,
    follow: Follow,
    pub counts: Arc<Counts>,
    started: Instant,
    done: Arc<AtomicBool>,
    /// A plain line was written: the last one is written at the end too (a
    /// run too short for one says nothing on stderr).
    shown: Arc<AtomicBool>,
    reporter: Option<std::thread::JoinHandle<()>>,
    bar: Option<indicatif::ProgressBar>,
}

/// The plain line: `replay: read 4000/10000, matched 4000, written 3500, 1000/s, about 7s left`.
pub(crate) fn line(
    what: &str,
    s: Seen,
    total: Option<u64>,
    follow: Follow,
    elapsed: Duration,
) -> String {
    let of = |n: u64, f: Follow| match total.filter(|_| f == follow) {
        Some(t) => format!("{n}/{t}"),
        None => n.to_string(),
    };
    let mut out = format!("{what}: read {}", of(s.read, Follow::Read));
    if follow == Follow::Written {
        out.push_str(&format!(
            ", matched {}, written {}",
            s.matched,
            of(s.written, Follow::Written)
        ));
    }
    let done = match follow {
        Follow::Read => s.read,
        Follow::Written => s.written,
    };
    let secs = elapsed.as_secs_f64();
    if secs > 0.0 {
        let rate = done as f64 / secs;
        out.push_str(&format!(", {rate:.0}/s"));
        if let Some(t) = total {
            if rate > 0.0 && t >= done {
                out.push_str(&format!(", about {:.0}s left", (t - done) as f64 / rate));
            }
        }
    }
    out
}

impl Progress {
    /// Starts showing `what`'s progress toward `total` (records or events).
    pub fn start(what: &str, total: Option<u64>, follow: Follow) -> Progress {
        let counts = Arc::new(Counts::default());
        let done = Arc::new(AtomicBool::new(false));
        let shown = Arc::new(AtomicBool::new(false));
        let started = Instant::now();
        let (bar, reporter) = if std::io::stderr().is_terminal() {
            let bar = match total {
                Some(t) => indicatif::ProgressBar::new(t),
                None => indicatif::ProgressBar::new_spinner(),
            };
            let style = indicatif::ProgressStyle::with_template(
                "{prefix} [{bar:30}] {pos}/{len} {msg} {per_sec} ~{eta} left",
            )
            .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar())
            .progress_chars("=> ");
            bar.set_style(style);
            bar.set_prefix(what.to_string());
            bar.enable_steady_tick(Duration::from_millis(200));
            shown.store(true, Ordering::Relaxed);
            (Some(bar), None)
        } else {
            let (c, d, w) = (counts.clone(), done.clone(), what.to_string());
            let sh = shown.clone();
            let handle = std::thread::spawn(move || {
                let mut next = started + PLAIN_EVERY;
                while !d.load(Ordering::Relaxed) {
                    std::thread::park_timeout(next.saturating_duration_since(Instant::now()));
                    if d.load(Ordering::Relaxed) {
                        break;
                    }
                    if Instant::now() >= next {
                        eprintln!("{}", line(&w, seen(&c), total, follow, started.elapsed()));
                        sh.store(true, Ordering::Relaxed);
                        next += PLAIN_EVERY;
                    }
                }
            });
            (None, Some(handle))
        };
        Progress {
            what: what.to_string(),
            total,
            follow,
            counts,
            started,
            done,
            shown,
            reporter,
            bar,
        }
    }

    /// Updates a terminal's bar (the plain reporter reads the counters itself).
    pub fn tick(&self) {
        if let Some(bar) = &self.bar {
            let s = seen(&self.counts);
            let pos = match self.follow {
                Follow::Read => s.read,
                Follow::Written => s.written,
            };
            bar.set_position(pos);
            if self.follow == Follow::Written {
                bar.set_message(format!("read {} matched {}", s.read, s.matched));
            }
        }
    }

    /// Stops showing progress; the last state as a plain line, unless the run
    /// was too short to show any.
    pub fn finish(mut self) -> Seen {
        self.stop()
    }

    fn stop(&mut self) -> Seen {
        self.done.store(true, Ordering::Relaxed);
        if let Some(r) = self.reporter.take() {
            r.thread().unpark();
            let _ = r.join();
        }
        let s = seen(&self.counts);
        if let Some(bar) = self.bar.take() {
            self.tick_with(&bar, s);
            bar.finish_and_clear();
        }
        if self.shown.load(Ordering::Relaxed) {
            let elapsed = self.started.elapsed();
            eprintln!("{}", line(&self.what, s, self.total, self.follow, elapsed));
        }
        s
    }

    fn tick_with(&self, bar: &indicatif::ProgressBar, s: Seen) {
        bar.set_position(match self.follow {
            Follow::Read => s.read,
            Follow::Written => s.written,
        });
    }
}

impl Drop for Progress {
    fn drop(&mut self) {
        if !self.done.load(Ordering::Relaxed) {
            let _ = self.stop();
        }
    }
}

fn seen(c: &Counts) -> Seen {
    Seen {
        read: c.read.load(Ordering::Relaxed),
        matched: c.matched.load(Ordering::Relaxed),
        written: c.written.load(Ordering::Relaxed),
    }
}

/// Set by Ctrl-C (SIGINT): the commands stop taking records, finish what they
/// began, and print what they did.
#[derive(Clone, Default)]
pub struct Stop(Arc<AtomicBool>);

impl Stop {
    pub fn asked(&self) -> bool {
        self.0.load(Ordering::Relaxed)
    }

    pub(crate) fn ask(&self) {
        self.0.store(true, Ordering::Relaxed);
    }

    /// A stop that Ctrl-C (SIGINT) asks for, from now until the runtime ends.
    pub fn on_ctrl_c() -> Stop {
        let stop = Stop::default();
        let s = stop.clone();
        tokio::spawn(async move {
            if tokio::signal::ctrl_c().await.is_ok() {
                s.ask();
            }
        });
        stop
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_plain_line_says_what_was_done_and_what_is_left() {
        let s = Seen {
            read: 4_000,
            matched: 4_000,
            written: 3_000,
        };
        assert_eq!(
            line(
                "replay",
                s,
                Some(10_000),
                Follow::Written,
                Duration::from_secs(3)
            ),
            "replay: read 4000, matched 4000, written 3000/10000, 1000/s, about 7s left"
        );
        assert_eq!(
            line(
                "inspect",
                s,
                Some(8_000),
                Follow::Read,
                Duration::from_secs(2)
            ),
            "inspect: read 4000/8000, 2000/s, about 2s left"
        );
        assert_eq!(
            line("inspect", s, None, Follow::Read, Duration::ZERO),
            "inspect: read 4000"
        );
    }
}
