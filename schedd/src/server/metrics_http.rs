//! The Prometheus endpoint on `scheduler.metrics_listen`: a minimal HTTP/1.1 responder.
//!
//! `GET /metrics` (or `HEAD`) answers the metrics, in the Prometheus text format 0.0.4, or in
//! OpenMetrics when the scraper's `Accept` names it. Another method on `/metrics` gets 405,
//! any other path 404, anything that is not an HTTP/1.x request 400, a request head over
//! [`MAX_HEAD`] bytes 431. One request per connection (`Connection: close`); a client that
//! sends nothing complete within [`READ_TIMEOUT`] is dropped, and at most [`MAX_CONNECTIONS`]
//! are served at once (more are closed at once), so a slow or hostile client cannot hold
//! schedd's resources.

use crate::metrics::Format;
use crate::shell::Cluster;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::TcpListener;
use tokio::sync::Semaphore;

/// The largest request head (request line and headers) read.
pub(super) const MAX_HEAD: usize = 8 * 1024;
/// How long a client may take to send its request head.
pub(super) const READ_TIMEOUT: Duration = Duration::from_secs(5);
/// How long writing the answer may take.
const WRITE_TIMEOUT: Duration = Duration::from_secs(10);
/// Connections served at once.
pub(super) const MAX_CONNECTIONS: usize = 32;
/// After answering, what the client still sends is read and dropped for this long (at most
/// [`MAX_DRAIN`] bytes) before the connection closes: closing with unread input would reset
/// the connection, and the client could lose the answer (a 400 or 431 in particular).
const DRAIN_TIMEOUT: Duration = Duration::from_secs(1);
const MAX_DRAIN: usize = 64 * 1024;

/// Serves `listener` until `stop` completes.
pub(super) async fn serve(
    listener: TcpListener,
    cluster: Arc<Cluster>,
    stop: impl Future<Output = ()>,
) {
    let permits = Arc::new(Semaphore::new(MAX_CONNECTIONS));
    tokio::pin!(stop);
    loop {
        let stream = tokio::select! {
            _ = &mut stop => return,
            accepted = listener.accept() => match accepted {
                Ok((stream, _)) => stream,
                Err(e) => {
                    // Out of file descriptors, most likely: let some close before trying again.
                    tracing::warn!("metrics endpoint: accept failed: {e}");
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    continue;
                }
            },
        };
        let Ok(permit) = permits.clone().try_acquire_owned() else {
            continue; // too many at once: this one is closed unanswered
        };
        let cluster = cluster.clone();
        tokio::spawn(async move {
            let render = |format| async move {
                // The census takes the state lock for one pass over the jobs: not on a worker.
                tokio::task::spawn_blocking(move || cluster.metrics_text(format))
                    .await
                    .unwrap_or_default()
            };
            handle(stream, render, READ_TIMEOUT).await;
            drop(permit);
        });
    }
}

/// A request as far as this endpoint cares.
#[derive(Debug, PartialEq, Eq)]
pub(super) struct Request {
    pub method: String,
    pub path: String,
    pub accept: Option<String>,
}

/// An answer without the metrics (the metrics are rendered only for a 200).
#[derive(Debug, PartialEq, Eq, Clone, Copy)]
pub(super) enum Route {
    Metrics { head_only: bool },
    Status(u16),
}

/// Reads a request head: `Ok(Some(head))` once the blank line arrived, `Ok(None)` when the
/// client closed first, `Err(431)` when it is too long.
async fn read_head<S: AsyncRead + Unpin>(stream: &mut S) -> Result<Option<Vec<u8>>, u16> {
    let mut buf = Vec::with_capacity(1024);
    let mut chunk = [0u8; 1024];
    loop {
        let n = stream.read(&mut chunk).await.map_err(|_| 400u16)?;
        if n == 0 {
            return Ok(None);
        }
        let searched_from = buf.len().saturating_sub(3);
        buf.extend_from_slice(&chunk[..n]);
        if let Some(end) = find(&buf[searched_from..], b"\r\n\r\n") {
            let end = searched_from + end + 4;
            if end > MAX_HEAD {
                return Err(431);
            }
            buf.truncate(end);
            return Ok(Some(buf));
        }
        if buf.len() > MAX_HEAD {
            return Err(431);
        }
    }
}

fn find(hay: &[u8], needle: &[u8]) -> Option<usize> {
    hay.windows(needle.len()).position(|w| w == needle)
}

fn is_token(s: &str) -> bool {
    !s.is_empty()
        && s.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b))
}

/// Parses a request head (request line, headers, blank line). `Err(400)` for anything that
/// is not an HTTP/1.0 or 1.1 request.
pub(super) fn parse_request(head: &[u8]) -> Result<Request, u16> {
    let text = std::str::from_utf8(head).map_err(|_| 400u16)?;
    let text = text.strip_suffix("\r\n\r\n").ok_or(400u16)?;
    let mut lines = text.split("\r\n");
    let request_line = lines.next().ok_or(400u16)?;
    let mut parts = request_line.split(' ');
    let (Some(method), Some(target), Some(version), None) =
        (parts.next(), parts.next(), parts.next(), parts.next())
    else {
        return Err(400);
    };
    if !is_token(method)
        || !target.starts_with('/')
        || target.bytes().any(|b| !b.is_ascii_graphic())
        || !matches!(version, "HTTP/1.1" | "HTTP/1.0")
    {
        return Err(400);
    }
    let mut accept = None;
    for line in lines {
        let (name, value) = line.split_once(':').ok_or(400u16)?;
        if !is_token(name) || value.bytes().any(|b| b.is_ascii_control() && b != b'\t') {
            return Err(400);
        }
        if name.eq_ignore_ascii_case("accept") {
            accept = Some(value.trim().to_string());
        }
    }
    let path = target.split('?').next().unwrap_or_default();
    Ok(Request {
        method: method.to_string(),
        path: path.to_string(),
        accept,
    })
}

pub(super) fn route(req: &Request) -> Route {
    if req.path != "/metrics" {
        return Route::Status(404);
    }
    match req.method.as_str() {
        "GET" => Route::Metrics { head_only: false },
        "HEAD" => Route::Metrics { head_only: true },
        _ => Route::Status(405),
    }
}

fn reason(status: u16) -> &'static str {
    match status {
        200 => "OK",
        400 => "Bad Request",
        404 => "Not Found",
        405 => "Method Not Allowed",
        431 => "Request Header Fields Too Large",
        _ => "Error",
    }
}

fn error_body(status: u16) -> &'static str {
    match status {
        404 => "not found: this endpoint serves only /metrics\n",
        405 => "method not allowed: use GET /metrics\n",
        431 => "request head too large\n",
        _ => "bad request\n",
    }
}

/// Answers one request on `stream`, then closes it; a client that has not sent its request
/// head within `read_timeout` is dropped unanswered. `render` produces the metrics in a
/// format. Never panics, whatever the client sends.
pub(super) async fn handle<S, F, Fut>(mut stream: S, render: F, read_timeout: Duration)
where
    S: AsyncRead + AsyncWrite + Unpin,
    F: FnOnce(Format) -> Fut,
    Fut: Future<Output = String>,
{
    let route = match tokio::time::timeout(read_timeout, read_head(&mut stream)).await {
        Err(_) | Ok(Ok(None)) => return, // too slow, or closed before a whole request
        Ok(Err(status)) => Err(status),
        Ok(Ok(Some(head))) => parse_request(&head).map(|req| (route(&req), req.accept)),
    };
    let (status, content_type, body, head_only) = match route {
        Ok((Route::Metrics { head_only }, accept)) => {
            let format = Format::from_accept(accept.as_deref());
            (200, format.content_type(), render(format).await, head_only)
        }
        Ok((Route::Status(status), _)) | Err(status) => (
            status,
            "text/plain; charset=utf-8",
            error_body(status).to_string(),
            false,
        ),
    };
    let allow = if status == 405 {
        "Allow: GET, HEAD\r\n"
    } else {
        ""
    };
    let mut out = format!(
        "HTTP/1.1 {status} {}\r\nContent-Type: {content_type}\r\nContent-Length: {}\r\n\
         Connection: close\r\n{allow}\r\n",
        reason(status),
        body.len()
    )
    .into_bytes();
    if !head_only {
        out.extend_from_slice(body.as_bytes());
    }
    let written = tokio::time::timeout(WRITE_TIMEOUT, async {
        stream.write_all(&out).await?;
        stream.shutdown().await
    })
    .await;
    if matches!(written, Ok(Ok(()))) {
        let _ = tokio::time::timeout(DRAIN_TIMEOUT, async {
            let mut sink = [0u8; 4096];
            let mut drained = 0;
            while drained < MAX_DRAIN {
                match stream.read(&mut sink).await {
                    Ok(0) | Err(_) => break,
                    Ok(n) => drained += n,
                }
            }
        })
        .await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Sends `request` to [`handle`] and returns what it answered.
    async fn exchange(request: &[u8]) -> String {
        let (mut client, server) = tokio::io::duplex(64 * 1024);
        let task = tokio::spawn(handle(
            server,
            |format| async move { format!("metrics in {format:?}\n") },
            READ_TIMEOUT,
        ));
        client.write_all(request).await.unwrap();
        let mut answer = Vec::new();
        client.read_to_end(&mut answer).await.unwrap();
        drop(client);
        task.await.unwrap();
        String::from_utf8(answer).unwrap()
    }

    #[tokio::test]
    async fn get_metrics_answers_200_with_the_text_format() {
        let a = exchange(b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n").await;
        assert!(a.starts_with("HTTP/1.1 200 OK\r\n"), "{a}");
        assert!(
            a.contains("\r\nContent-Type: text/plain; version=0.0.4; charset=utf-8\r\n"),
            "{a}"
        );
        assert!(a.contains("\r\nContent-Length: 16\r\n"), "{a}");
        assert!(a.contains("\r\nConnection: close\r\n"), "{a}");
        assert!(a.ends_with("\r\n\r\nmetrics in Text\n"), "{a}");
        // A query string is allowed; HTTP/1.0 too.
        let a = exchange(b"GET /metrics?x=1 HTTP/1.0\r\n\r\n").await;
        assert!(a.starts_with("HTTP/1.1 200 OK\r\n"), "{a}");
    }

    #[tokio::test]
    async fn openmetrics_when_accepted_and_head_without_body() {
        let a = exchange(
            b"GET /metrics HTTP/1.1\r\naccept: application/openmetrics-text;version=1.0.0\r\n\r\n",
        )
        .await;
        assert!(
            a.contains("Content-Type: application/openmetrics-text; version=1.0.0"),
            "{a}"
        );
        assert!(a.ends_with("metrics in OpenMetrics\n"), "{a}");
        let a = exchange(b"HEAD /metrics HTTP/1.1\r\n\r\n").await;
        assert!(a.starts_with("HTTP/1.1 200 OK\r\n"), "{a}");
        assert!(a.contains("Content-Length: 16\r\n"), "{a}");
        assert!(a.ends_with("\r\n\r\n"), "{a}");
    }

    #[tokio::test]
    async fn other_paths_are_404_and_other_methods_405() {
        for req in [
            &b"GET / HTTP/1.1\r\n\r\n"[..],
            b"GET /metricsx HTTP/1.1\r\n\r\n",
            b"GET /metrics/ HTTP/1.1\r\n\r\n",
            b"POST /other HTTP/1.1\r\n\r\n",
        ] {
            let a = exchange(req).await;
            assert!(a.starts_with("HTTP/1.1 404 Not Found\r\n"), "{a}");
            assert!(a.ends_with("only /metrics\n"), "{a}");
        }
        let a = exchange(b"POST /metrics HTTP/1.1\r\nContent-Length: 0\r\n\r\n").await;
        assert!(a.starts_with("HTTP/1.1 405 Method Not Allowed\r\n"), "{a}");
        assert!(a.contains("\r\nAllow: GET, HEAD\r\n"), "{a}");
    }

    #[tokio::test]
    async fn garbage_is_400() {
        for req in [
            &b"\r\n\r\n"[..],
            b"hello\r\n\r\n",
            b"GET /metrics\r\n\r\n",
            b"GET /metrics HTTP/2.0\r\n\r\n",
            b"GET  /metrics HTTP/1.1\r\n\r\n",
            b"GET /metrics HTTP/1.1 extra\r\n\r\n",
            b"GET metrics HTTP/1.1\r\n\r\n",
            b"G(T /metrics HTTP/1.1\r\n\r\n",
            b"GET /metrics HTTP/1.1\r\nno colon\r\n\r\n",
            b"GET /metrics HTTP/1.1\r\nBad Name: x\r\n\r\n",
            b"GET /metrics HTTP/1.1\r\nX: a\x01b\r\n\r\n",
            b"GET /m\xffetrics HTTP/1.1\r\n\r\n",
            b"\x00\x01\x02\x03\r\n\r\n",
            b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03\r\n\r\n",
        ] {
            let a = exchange(req).await;
            assert!(
                a.starts_with("HTTP/1.1 400 Bad Request\r\n"),
                "{:?}: {a}",
                String::from_utf8_lossy(req)
            );
        }
    }

    #[tokio::test]
    async fn an_oversized_head_is_431_and_reading_stops() {
        let mut req = b"GET /metrics HTTP/1.1\r\nX: ".to_vec();
        req.extend(std::iter::repeat_n(b'a', MAX_HEAD));
        req.extend_from_slice(b"\r\n\r\n");
        let a = exchange(&req).await;
        assert!(
            a.starts_with("HTTP/1.1 431 Request Header Fields Too Large\r\n"),
            "{a}"
        );
        // Endless bytes without a blank line: answered once the limit is passed.
        let (mut client, server) = tokio::io::duplex(4 * MAX_HEAD);
        let task = tokio::spawn(handle(server, |_| async { String::new() }, READ_TIMEOUT));
        client.write_all(&vec![b'x'; 2 * MAX_HEAD]).await.unwrap();
        let mut answer = Vec::new();
        client.read_to_end(&mut answer).await.unwrap();
        drop(client);
        task.await.unwrap();
        assert!(answer.starts_with(b"HTTP/1.1 431 "));
    }

    #[tokio::test]
    async fn a_client_that_closes_early_gets_nothing_and_nothing_breaks() {
        let (mut client, server) = tokio::io::duplex(1024);
        let task = tokio::spawn(handle(server, |_| async { String::new() }, READ_TIMEOUT));
        client.write_all(b"GET /metr").await.unwrap();
        client.shutdown().await.unwrap();
        let mut answer = Vec::new();
        client.read_to_end(&mut answer).await.unwrap();
        task.await.unwrap();
        assert!(answer.is_empty());
    }

    #[tokio::test]
    async fn a_silent_client_is_dropped_after_the_read_timeout() {
        let (mut client, server) = tokio::io::duplex(1024);
        let timeout = Duration::from_millis(100);
        let task = tokio::spawn(handle(server, |_| async { String::new() }, timeout));
        client
            .write_all(b"GET /metrics HTTP/1.1\r\n")
            .await
            .unwrap();
        tokio::time::timeout(Duration::from_secs(5), task)
            .await
            .expect("dropped after its read timeout")
            .unwrap();
        let mut answer = Vec::new();
        client.read_to_end(&mut answer).await.unwrap();
        assert!(answer.is_empty());
    }

    #[test]
    fn parse_finds_the_path_and_accept() {
        assert_eq!(
            parse_request(b"GET /metrics?a=b HTTP/1.1\r\nHost: h\r\nACCEPT:  text/plain \r\n\r\n"),
            Ok(Request {
                method: "GET".into(),
                path: "/metrics".into(),
                accept: Some("text/plain".into()),
            })
        );
        assert_eq!(parse_request(b"GET /metrics HTTP/1.1\r\n"), Err(400));
    }
}
