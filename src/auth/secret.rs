//! A secret that may change while Courier runs: from an environment variable
//! (fixed for the process's life) or from a file re-read every
//! [`POLL_INTERVAL`] and whenever the API refused the current value. A
//! Kubernetes Secret volume swaps a `..data` symlink to a new directory: the
//! path is opened anew each time, so the swap is seen like any other change.
//!
//! The value is parsed once per change (`parse`): a header value, a list of
//! signing keys. A file that becomes unreadable, empty or malformed keeps the
//! last good value, with a warning naming the field (never a value).

use crate::config::{read_secret_file, ConfigError, SecretSpec};
use std::path::PathBuf;
use std::sync::{Arc, RwLock, Weak};
use std::time::Duration;

/// How often a secret file is looked at.
pub(crate) const POLL_INTERVAL: Duration = Duration::from_secs(1);

/// Parses a secret's text into what the requests use; the error must not hold
/// the text.
pub(crate) type Parse<T> = fn(&str) -> Result<T, String>;

pub(crate) struct Watched<T> {
    field: &'static str,
    /// `None`: an environment variable (never re-read).
    path: Option<PathBuf>,
    parse: Parse<T>,
    state: RwLock<Current<T>>,
}

/// How many replaced values stay in the redaction set (an API may echo a
/// request sent with one just before the rotation).
pub(crate) const KEPT_FOR_REDACTION: usize = 2;

struct Current<T> {
    text: String,
    /// The values it replaced, newest first (at most [`KEPT_FOR_REDACTION`]).
    previous: Vec<String>,
    value: Arc<T>,
    /// The last read failed (warned once until a good read).
    failing: bool,
}

impl<T: Send + Sync + 'static> Watched<T> {
    /// Reads the secret now (start-up: an error stops Courier, naming the
    /// field). A file's watcher runs on the current Tokio runtime until the
    /// secret is dropped.
    pub(crate) fn start(
        spec: &SecretSpec,
        parse: Parse<T>,
    ) -> Result<Arc<Watched<T>>, ConfigError> {
        let text = spec.read()?;
        let value = parse(&text).map_err(|e| crate::config::invalid(spec.field(), e))?;
        let path = match spec {
            SecretSpec::Env { .. } => None,
            SecretSpec::File { path, .. } => Some(path.clone()),
        };
        let w = Arc::new(Watched {
            field: spec.field(),
            path,
            parse,
            state: RwLock::new(Current {
                text,
                previous: Vec::new(),
                value: Arc::new(value),
                failing: false,
            }),
        });
        if w.path.is_some() {
            tokio::spawn(watch(Arc::downgrade(&w)));
        }
        Ok(w)
    }

    /// A fixed value (tests, and a token given in code).
    pub(crate) fn fixed(
        field: &'static str,
        text: &str,
        parse: Parse<T>,
    ) -> Result<Watched<T>, String> {
        Ok(Watched {
            field,
            path: None,
            parse,
            state: RwLock::new(Current {
                text: text.to_string(),
                previous: Vec::new(),
                value: Arc::new(parse(text)?),
                failing: false,
            }),
        })
    }

    /// The current value.
    pub(crate) fn get(&self) -> Arc<T> {
        self.state
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .value
            .clone()
    }

    /// The current text and the last [`KEPT_FOR_REDACTION`] it replaced, newest
    /// first (for redaction from answers' bodies).
    pub(crate) fn texts(&self) -> Vec<String> {
        let s = self.state.read().unwrap_or_else(|e| e.into_inner());
        std::iter::once(&s.text)
            .chain(&s.previous)
            .cloned()
            .collect()
    }

    /// Reads the file now; `true` when its value changed (an environment
    /// variable never does).
    pub(crate) async fn reload(&self) -> bool {
        let Some(path) = &self.path else {
            return false;
        };
        let path = path.clone();
        let read = tokio::task::spawn_blocking(move || read_secret_file(&path))
            .await
            .unwrap_or_else(|e| Err(e.to_string()));
        self.apply(read)
    }

    fn apply(&self, read: Result<String, String>) -> bool {
        let parsed = read.and_then(|t| (self.parse)(&t).map(|v| (t, v)));
        let mut s = self.state.write().unwrap_or_else(|e| e.into_inner());
        match parsed {
            Ok((text, _)) if text == s.text => {
                s.failing = false;
                false
            }
            Ok((text, value)) => {
                let old = std::mem::replace(&mut s.text, text);
                s.previous.insert(0, old);
                s.previous.truncate(KEPT_FOR_REDACTION);
                s.value = Arc::new(value);
                s.failing = false;
                metrics::counter!(crate::metrics::SECRET_RELOADS, "field" => self.field)
                    .increment(1);
                tracing::info!(
                    field = self.field,
                    "secret file changed: the next requests use the new value"
                );
                true
            }
            Err(e) => {
                if !s.failing {
                    s.failing = true;
                    tracing::warn!(field = self.field, error = %e, "secret file unusable: keeping the last good value");
                }
                false
            }
        }
    }
}

/// Re-reads the file every [`POLL_INTERVAL`] while the secret is alive.
async fn watch<T: Send + Sync + 'static>(w: Weak<Watched<T>>) {
    let mut tick = tokio::time::interval(POLL_INTERVAL);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    tick.tick().await;
    loop {
        tick.tick().await;
        let Some(w) = w.upgrade() else {
            return;
        };
        w.reload().await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn upper(s: &str) -> Result<String, String> {
        if s.contains(' ') {
            Err("has a space".into())
        } else {
            Ok(s.to_uppercase())
        }
    }

    /// A Kubernetes Secret volume: `dir/name` → `..data/name`, `..data` → a
    /// timestamped directory, swapped atomically by a rename of a new symlink.
    fn k8s_swap(dir: &std::path::Path, generation: u32, value: &str) {
        let ts = dir.join(format!("..2026_12_02_{generation}"));
        std::fs::create_dir_all(&ts).expect("dir");
        std::fs::write(ts.join("token"), format!("{value}\n")).expect("write");
        let tmp = dir.join("..data_tmp");
        let _ = std::fs::remove_file(&tmp);
        std::os::unix::fs::symlink(ts.file_name().expect("name"), &tmp).expect("symlink");
        std::fs::rename(&tmp, dir.join("..data")).expect("swap");
        if !dir.join("token").exists() {
            std::os::unix::fs::symlink("..data/token", dir.join("token")).expect("link");
        }
    }

    #[tokio::test]
    async fn a_swapped_secret_volume_is_seen_and_a_bad_value_keeps_the_old() {
        let dir = std::env::temp_dir().join(format!("courier-secret-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).expect("dir");
        k8s_swap(&dir, 1, "first");
        let spec = SecretSpec::File {
            field: "api.token_file",
            path: dir.join("token"),
        };
        let w = Watched::start(&spec, upper).expect("start");
        assert_eq!(*w.get(), "FIRST");
        assert!(!w.reload().await, "unchanged");
        k8s_swap(&dir, 2, "second");
        assert!(w.reload().await, "the swap is a change");
        assert_eq!(*w.get(), "SECOND");
        assert_eq!(
            w.texts(),
            ["second", "first"],
            "the replaced value stays in the redaction set"
        );
        k8s_swap(&dir, 3, "not valid");
        assert!(!w.reload().await);
        assert_eq!(
            *w.get(),
            "SECOND",
            "a malformed value keeps the last good one"
        );
        k8s_swap(&dir, 4, "third");
        k8s_swap(&dir, 5, "fourth");
        assert!(w.reload().await);
        k8s_swap(&dir, 6, "fifth");
        assert!(w.reload().await);
        assert_eq!(w.texts(), ["fifth", "fourth", "second"], "two kept");
        std::fs::remove_dir_all(&dir).ok();
    }
}
