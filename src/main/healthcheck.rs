//! `courier healthcheck`: asks the instance's own listener, with a plain
//! HTTP/1.1 request (no curl in the image).

use std::net::SocketAddr;

use crate::exit::Exit;
use crate::load;

/// `courier healthcheck`: [`Exit::Ok`] when the instance's own listener answers
/// 200 on `/healthz` (`/readyz` with `ready`), else [`Exit::No`] with the reason
/// on stderr. Never [`Exit::Failed`] (2): Docker reserves it.
pub(crate) fn healthcheck(
    config: &std::path::Path,
    ready: bool,
    timeout: std::time::Duration,
) -> Exit {
    let path = if ready { "/readyz" } else { "/healthz" };
    let addr = match load(config) {
        Ok(cfg) => probe_addr(&cfg.metrics.listen),
        Err(e) => Err(format!("{e:#}")),
    };
    match addr.and_then(|a| http_status(a, path, timeout).map(|st| (a, st))) {
        Ok((a, (200, _))) => {
            println!("healthy: http://{a}{path} answered 200");
            Exit::Ok
        }
        Ok((a, (code, line))) => {
            eprintln!("unhealthy: http://{a}{path} answered {code} ({line})");
            Exit::No
        }
        Err(e) => {
            eprintln!("unhealthy: {e}");
            Exit::No
        }
    }
}

/// Where to reach `metrics.listen` from inside the instance's host or container:
/// an unspecified address (0.0.0.0, [::]) is asked on loopback.
fn probe_addr(listen: &str) -> Result<SocketAddr, String> {
    if listen.is_empty() {
        return Err("metrics.listen is empty: the instance serves no /healthz".into());
    }
    let mut a: SocketAddr = listen
        .parse()
        .map_err(|_| format!("metrics.listen {listen:?} is not an address"))?;
    if a.ip().is_unspecified() {
        a.set_ip(match a {
            SocketAddr::V4(_) => std::net::Ipv4Addr::LOCALHOST.into(),
            SocketAddr::V6(_) => std::net::Ipv6Addr::LOCALHOST.into(),
        });
    }
    Ok(a)
}

/// One `GET path` (HTTP/1.1, `Connection: close`) to `addr` within `timeout`:
/// the status code and the status line.
fn http_status(
    addr: SocketAddr,
    path: &str,
    timeout: std::time::Duration,
) -> Result<(u16, String), String> {
    use std::io::{Read as _, Write as _};
    let deadline = std::time::Instant::now() + timeout;
    let left = || {
        deadline
            .checked_duration_since(std::time::Instant::now())
            .filter(|d| !d.is_zero())
            .ok_or_else(|| format!("no answer from {addr} within {timeout:?}"))
    };
    let mut s = std::net::TcpStream::connect_timeout(&addr, left()?)
        .map_err(|e| format!("cannot connect to {addr}: {e}"))?;
    s.set_write_timeout(Some(left()?))
        .map_err(|e| e.to_string())?;
    s.write_all(
        format!("GET {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n").as_bytes(),
    )
    .map_err(|e| format!("cannot send to {addr}: {e}"))?;
    // The status line is all that is needed; read until it is complete.
    let mut buf = Vec::with_capacity(256);
    let mut chunk = [0u8; 256];
    while !buf.windows(2).any(|w| w == b"\r\n") && buf.len() < 4096 {
        s.set_read_timeout(Some(left()?))
            .map_err(|e| e.to_string())?;
        match s.read(&mut chunk) {
            Ok(0) => break,
            Ok(n) => buf.extend_from_slice(&chunk[..n]),
            Err(e) => return Err(format!("no answer from {addr}: {e}")),
        }
    }
    let text = String::from_utf8_lossy(&buf);
    let line = text.lines().next().unwrap_or("").trim().to_string();
    let mut words = line.split_whitespace();
    match (
        words.next(),
        words.next().and_then(|c| c.parse::<u16>().ok()),
    ) {
        (Some(v), Some(code)) if v.starts_with("HTTP/") => Ok((code, line)),
        _ => Err(format!("{addr} did not answer HTTP: {line:?}")),
    }
}
#[cfg(test)]
mod tests {
    use super::{http_status, probe_addr};
    use std::io::{Read as _, Write as _};
    use std::time::Duration;

    /// A listener that answers one request with `answer` (None: accepts and
    /// says nothing).
    fn one_answer(answer: Option<&'static str>) -> std::net::SocketAddr {
        let l = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
        let addr = l.local_addr().expect("addr");
        std::thread::spawn(move || {
            if let Ok((mut s, _)) = l.accept() {
                let mut req = [0u8; 1024];
                let _ = s.read(&mut req);
                match answer {
                    Some(a) => {
                        let _ = s.write_all(a.as_bytes());
                    }
                    None => std::thread::sleep(Duration::from_secs(3)),
                }
            }
        });
        addr
    }

    #[test]
    fn the_probe_reads_the_status_line() {
        let t = Duration::from_secs(2);
        let ok = one_answer(Some("HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok"));
        assert_eq!(http_status(ok, "/healthz", t).map(|s| s.0), Ok(200));
        let bad = one_answer(Some("HTTP/1.1 503 Service Unavailable\r\n\r\nwedged"));
        assert_eq!(http_status(bad, "/healthz", t).map(|s| s.0), Ok(503));
        let junk = one_answer(Some("SSH-2.0-OpenSSH\r\n"));
        assert!(http_status(junk, "/healthz", t).is_err());
        let silent = one_answer(None);
        let e = http_status(silent, "/healthz", Duration::from_millis(300)).unwrap_err();
        assert!(e.contains("no answer"), "{e}");
        // Nothing listening: a port just released.
        let closed = std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .expect("port");
        let e = http_status(closed, "/healthz", t).unwrap_err();
        assert!(e.contains("cannot connect"), "{e}");
    }

    #[test]
    fn an_unspecified_listener_is_asked_on_loopback() {
        assert_eq!(
            probe_addr("0.0.0.0:9464").map(|a| a.to_string()),
            Ok("127.0.0.1:9464".into())
        );
        assert_eq!(
            probe_addr("[::]:9464").map(|a| a.to_string()),
            Ok("[::1]:9464".into())
        );
        assert_eq!(
            probe_addr("10.0.0.7:9464").map(|a| a.to_string()),
            Ok("10.0.0.7:9464".into())
        );
        assert!(probe_addr("").is_err());
    }
}
