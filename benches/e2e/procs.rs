//! Child processes (always killed on drop) and what `/proc` says about a process:
//! CPU seconds, peak RSS, the load average.

use anyhow::Context as _;
use std::path::Path;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

/// Clock ticks per second (`getconf CLK_TCK`), the unit of `/proc/<pid>/stat` times.
pub fn clock_ticks() -> f64 {
    Command::new("getconf")
        .arg("CLK_TCK")
        .output()
        .ok()
        .and_then(|o| String::from_utf8(o.stdout).ok())
        .and_then(|s| s.trim().parse::<f64>().ok())
        .filter(|t| *t > 0.0)
        .unwrap_or(100.0)
}

/// Which process to read: a child by pid, or the bench process itself.
#[derive(Debug, Clone, Copy)]
pub enum Pid {
    Of(u32),
    SelfProcess,
}

impl Pid {
    fn path(self, file: &str) -> String {
        match self {
            Pid::Of(pid) => format!("/proc/{pid}/{file}"),
            Pid::SelfProcess => format!("/proc/self/{file}"),
        }
    }
}

/// utime + stime of a process (all its threads, live and exited), in seconds.
pub fn cpu_seconds(pid: Pid, ticks: f64) -> Option<f64> {
    let stat = std::fs::read_to_string(pid.path("stat")).ok()?;
    // Field 2 (comm) may contain spaces and parentheses: fields 3.. follow the last ')'.
    let rest = stat.get(stat.rfind(')')? + 1..)?;
    let fields: Vec<&str> = rest.split_whitespace().collect();
    // fields[0] is field 3 (state); utime is field 14, stime field 15.
    let utime: u64 = fields.get(11)?.parse().ok()?;
    let stime: u64 = fields.get(12)?.parse().ok()?;
    Some((utime + stime) as f64 / ticks)
}

/// Peak resident set size (`VmHWM`), in bytes.
pub fn peak_rss_bytes(pid: Pid) -> Option<u64> {
    status_kb(pid, "VmHWM:").map(|kb| kb * 1024)
}

/// Current resident set size (`VmRSS`), in bytes.
pub fn current_rss_bytes(pid: Pid) -> Option<u64> {
    status_kb(pid, "VmRSS:").map(|kb| kb * 1024)
}

fn status_kb(pid: Pid, field: &str) -> Option<u64> {
    let status = std::fs::read_to_string(pid.path("status")).ok()?;
    let line = status.lines().find(|l| l.starts_with(field))?;
    line.split_whitespace().nth(1)?.parse().ok()
}

/// The 1-minute load average, to flag cells measured while the machine was busy.
pub fn loadavg() -> Option<f64> {
    std::fs::read_to_string("/proc/loadavg")
        .ok()?
        .split_whitespace()
        .next()?
        .parse()
        .ok()
}

pub fn free_port() -> anyhow::Result<u16> {
    Ok(std::net::TcpListener::bind("127.0.0.1:0")?
        .local_addr()?
        .port())
}

/// A child process that is killed (SIGKILL) and reaped when dropped, whatever
/// happened in between (error, panic, or the bench future being cancelled).
pub struct ChildGuard {
    child: Option<Child>,
    name: String,
}

impl ChildGuard {
    /// Spawns `cmd` with stdin closed and stdout/stderr appended to `log`.
    pub fn spawn(name: &str, cmd: &mut Command, log: &Path) -> anyhow::Result<ChildGuard> {
        let out = std::fs::File::create(log)
            .with_context(|| format!("creating log file {}", log.display()))?;
        let child = cmd
            .stdin(Stdio::null())
            .stdout(out.try_clone()?)
            .stderr(out)
            .spawn()
            .with_context(|| format!("spawning {name}"))?;
        Ok(ChildGuard {
            child: Some(child),
            name: name.to_string(),
        })
    }

    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(Child::id)
    }

    /// `Some(status)` once the process has exited (it is then reaped: no signal is
    /// ever sent to its pid again).
    pub fn exited(&mut self) -> Option<ExitStatus> {
        let status = self.child.as_mut()?.try_wait().ok()??;
        self.child = None;
        Some(status)
    }

    fn signal(&self, sig: &str) {
        if let Some(pid) = self.pid() {
            let _ = Command::new("kill")
                .arg(sig)
                .arg(pid.to_string())
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .status();
        }
    }

    /// Sends `sig` (e.g. `-TERM`), waits up to `grace` for the exit, then kills.
    /// Returns the exit code when the process exited by itself.
    pub async fn stop(&mut self, sig: &str, grace: Duration) -> Option<i32> {
        let mut child = self.child.take()?;
        if let Ok(Some(st)) = child.try_wait() {
            return st.code();
        }
        self.child = Some(child);
        self.signal(sig);
        let mut child = self.child.take()?;
        let until = Instant::now() + grace;
        loop {
            match child.try_wait() {
                Ok(Some(st)) => return st.code(),
                Ok(None) if Instant::now() < until => {
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
                _ => {
                    eprintln!("  {} did not exit within {grace:?}: killed", self.name);
                    let _ = child.kill();
                    let _ = child.wait();
                    return None;
                }
            }
        }
    }
}

impl Drop for ChildGuard {
    fn drop(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}
