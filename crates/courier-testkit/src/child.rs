//! A child process that cannot outlive its guard: the one child-process guard of
//! the tests, the drills and the bench (a Courier instance, the API stand-in as a
//! process, `perf`).

use super::{file_err, TestkitError};
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;
use tokio::process::{Child, Command};

/// A spawned child, killed (SIGKILL) and reaped when the guard is dropped, whatever
/// happened in between (an error, a panic, a cancelled future). Needs a Tokio
/// runtime: the child is awaited, not polled.
pub struct ChildGuard {
    /// `None` once the process was reaped (stopped, killed, or seen exited).
    child: Option<Child>,
    name: String,
    log: PathBuf,
}

impl ChildGuard {
    /// Spawns `cmd` with stdin closed and stdout and stderr written to `log`
    /// (created or truncated).
    pub fn spawn(
        name: &str,
        cmd: impl Into<Command>,
        log: &Path,
    ) -> Result<ChildGuard, TestkitError> {
        let mut cmd: Command = cmd.into();
        let out = std::fs::File::create(log).map_err(file_err("creating", log))?;
        let err = out.try_clone().map_err(file_err("opening", log))?;
        let child = cmd
            .stdin(Stdio::null())
            .stdout(out)
            .stderr(err)
            .kill_on_drop(true)
            .spawn()
            .map_err(|source| TestkitError::Spawn {
                binary: PathBuf::from(cmd.as_std().get_program()),
                source,
            })?;
        Ok(ChildGuard {
            child: Some(child),
            name: name.to_string(),
            log: log.to_path_buf(),
        })
    }

    pub fn name(&self) -> &str {
        &self.name
    }

    /// Its stdout and stderr.
    pub fn log(&self) -> &Path {
        &self.log
    }

    /// Whether the process may still run: started, and not yet stopped, killed or
    /// seen exited through this guard.
    pub fn is_live(&self) -> bool {
        self.child.is_some()
    }

    /// The process id while the process is [live](Self::is_live).
    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().and_then(Child::id)
    }

    /// `Some(code)` if the process has exited on its own (the code is `None` when a
    /// signal ended it); it is then reaped and no longer live. `None` while it runs.
    pub fn exited(&mut self) -> Option<Option<i32>> {
        let c = self.child.as_mut()?;
        match c.try_wait() {
            Ok(Some(st)) => {
                self.child = None;
                Some(st.code())
            }
            _ => None,
        }
    }

    /// SIGKILL: no shutdown path runs. Returns once the process is gone.
    pub async fn kill(&mut self) {
        if let Some(mut c) = self.child.take() {
            // Fails only if the process was already reaped, and `wait` then
            // returns at once.
            let _ = c.start_kill();
            let _ = c.wait().await;
        }
    }

    /// Sends `signal` (`-TERM`, `-INT`, …), then waits for the exit; see
    /// [`Self::wait_exit`] for the result. `Ok(None)` if the process is not live.
    pub async fn terminate(
        &mut self,
        signal: &str,
        timeout: Duration,
    ) -> Result<Option<i32>, TestkitError> {
        let Some(pid) = self.pid() else {
            return Ok(None);
        };
        let sent = Command::new("kill")
            .arg(signal)
            .arg(pid.to_string())
            .stdin(Stdio::null())
            .output()
            .await;
        let reason = match sent {
            Ok(out) if out.status.success() => None,
            Ok(out) => Some(String::from_utf8_lossy(&out.stderr).trim().to_string()),
            Err(e) => Some(format!("running kill: {e}")),
        };
        if let Some(reason) = reason {
            return Err(TestkitError::Signal {
                name: self.name.clone(),
                pid,
                reason,
            });
        }
        self.wait_exit(timeout).await
    }

    /// Waits for the process to exit and returns its exit code (`None` when a
    /// signal ended it). After `timeout` it is killed (SIGKILL) and
    /// [`TestkitError::ExitTimeout`] returned. `Ok(None)` if the process is not live.
    pub async fn wait_exit(&mut self, timeout: Duration) -> Result<Option<i32>, TestkitError> {
        let Some(mut c) = self.child.take() else {
            return Ok(None);
        };
        match tokio::time::timeout(timeout, c.wait()).await {
            Ok(Ok(st)) => Ok(st.code()),
            Ok(Err(source)) => {
                let _ = c.start_kill();
                let _ = c.wait().await;
                Err(TestkitError::Wait {
                    name: self.name.clone(),
                    source,
                })
            }
            Err(_) => {
                let _ = c.start_kill();
                let _ = c.wait().await;
                Err(TestkitError::ExitTimeout {
                    name: self.name.clone(),
                    timeout,
                    log: self.log.clone(),
                })
            }
        }
    }

    /// [`Self::terminate`] for tools that only need the outcome: the exit code
    /// when the process exited by itself within `grace`, else `None` (it was
    /// killed; the reason is printed).
    pub async fn stop(&mut self, signal: &str, grace: Duration) -> Option<i32> {
        match self.terminate(signal, grace).await {
            Ok(code) => code,
            Err(e) => {
                eprintln!("  {e}: killed");
                self.kill().await;
                None
            }
        }
    }
}

impl Drop for ChildGuard {
    /// SIGKILL, then reaped (waiting at most a second: a killed process exits at
    /// once), so nothing it held outlives the guard.
    fn drop(&mut self) {
        let Some(mut c) = self.child.take() else {
            return;
        };
        let _ = c.start_kill();
        let until = std::time::Instant::now() + Duration::from_secs(1);
        while matches!(c.try_wait(), Ok(None)) && std::time::Instant::now() < until {
            std::thread::sleep(Duration::from_millis(5));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_stopped_child_reports_its_exit_and_a_stuck_one_is_killed() {
        let dir = std::env::temp_dir().join(format!("courier-childguard-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let mut sh = Command::new("sh");
        sh.args([
            "-c",
            "trap 'exit 3' TERM; echo up; while :; do sleep 0.05; done",
        ]);
        let mut g = ChildGuard::spawn("sh", sh, &dir.join("sh.log")).unwrap();
        assert!(g.is_live() && g.pid().is_some());
        // Wait (polled, with a deadline) until the trap is installed.
        let until = std::time::Instant::now() + Duration::from_secs(10);
        while std::fs::read_to_string(g.log())
            .unwrap_or_default()
            .is_empty()
        {
            assert!(std::time::Instant::now() < until, "the child did not start");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        assert_eq!(g.stop("-TERM", Duration::from_secs(10)).await, Some(3));
        assert!(!g.is_live());

        let mut stuck = Command::new("sh");
        stuck.args(["-c", "trap '' TERM; echo up; while :; do sleep 0.05; done"]);
        let mut g = ChildGuard::spawn("stuck", stuck, &dir.join("stuck.log")).unwrap();
        while std::fs::read_to_string(g.log())
            .unwrap_or_default()
            .is_empty()
        {
            assert!(std::time::Instant::now() < until, "the child did not start");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        let r = g.terminate("-TERM", Duration::from_millis(300)).await;
        assert!(matches!(r, Err(TestkitError::ExitTimeout { .. })), "{r:?}");
        assert!(!g.is_live());

        // Dropped: killed and reaped at once.
        let mut sleeper = Command::new("sleep");
        sleeper.arg("600");
        let g = ChildGuard::spawn("sleep", sleeper, &dir.join("sleep.log")).unwrap();
        let proc_dir = format!("/proc/{}", g.pid().unwrap());
        assert!(Path::new(&proc_dir).exists());
        drop(g);
        assert!(
            !Path::new(&proc_dir).exists(),
            "{proc_dir} outlived its guard"
        );
        let _ = std::fs::remove_dir_all(&dir);
    }
}
