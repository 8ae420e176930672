//! What `/proc` says about a process: CPU seconds, peak RSS, the load average.
//! (Child processes: `courier_testkit::ChildGuard`.)

use std::process::Command;

/// Clock ticks per second (`getconf CLK_TCK`), the unit of `/proc/<pid>/stat` times.
pub(crate) fn clock_ticks() -> f64 {
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
pub(crate) enum Pid {
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
pub(crate) fn cpu_seconds(pid: Pid, ticks: f64) -> Option<f64> {
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
pub(crate) fn peak_rss_bytes(pid: Pid) -> Option<u64> {
    status_kb(pid, "VmHWM:").map(|kb| kb * 1024)
}

/// Current resident set size (`VmRSS`), in bytes.
pub(crate) fn current_rss_bytes(pid: Pid) -> Option<u64> {
    status_kb(pid, "VmRSS:").map(|kb| kb * 1024)
}

fn status_kb(pid: Pid, field: &str) -> Option<u64> {
    let status = std::fs::read_to_string(pid.path("status")).ok()?;
    let line = status.lines().find(|l| l.starts_with(field))?;
    line.split_whitespace().nth(1)?.parse().ok()
}

/// The 1-minute load average, to flag cells measured while the machine was busy.
pub(crate) fn loadavg() -> Option<f64> {
    std::fs::read_to_string("/proc/loadavg")
        .ok()?
        .split_whitespace()
        .next()?
        .parse()
        .ok()
}
