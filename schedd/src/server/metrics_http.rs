//! The Prometheus endpoint on `scheduler.metrics_listen`, served by hyper (HTTP/1.x).
//!
//! `GET /metrics` (or `HEAD`) answers the metrics, in the Prometheus text format 0.0.4, or in
//! OpenMetrics when the scraper's `Accept` names it. Another method on `/metrics` gets 405,
//! any other path 404, anything that is not an HTTP/1.x request 400, a request head over
//! [`MAX_HEAD`] bytes 431. One request per connection (`Connection: close`).
//!
//! Slow or idle clients cannot take the endpoint from scrapers:
//! - at most [`MAX_CONNECTIONS`] connections are open at once;
//! - places go to requests, not to connections: when every place is taken and another
//!   connection arrives, the connection that has waited longest without sending a whole
//!   request head is closed to make room for it (a slowloris client loses its place to the
//!   next scrape). Only when every place serves a request is the new connection closed
//!   unanswered;
//! - a request head must arrive within [`HEAD_TIMEOUT`], and a connection is closed
//!   [`CONNECTION_TIMEOUT`] after it was accepted, answer written or not.

use crate::metrics::Format;
use crate::shell::Cluster;
use bytes::Bytes;
use http_body_util::Full;
use hyper::body::Incoming;
use hyper::{header, Method, Request, Response, StatusCode};
use std::collections::BTreeMap;
use std::future::Future;
use std::os::fd::AsRawFd;
use std::pin::Pin;
use std::sync::{Arc, Mutex, PoisonError};
use std::task::{ready, Context, Poll};
use std::time::Duration;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tokio::task::AbortHandle;

/// The largest request head (request line and headers) read (hyper's smallest buffer).
pub(super) const MAX_HEAD: usize = 8 * 1024;
/// How long a client may take to send its request head.
pub(super) const HEAD_TIMEOUT: Duration = Duration::from_secs(5);
/// How long a connection may stay open in all: head, rendering, writing the answer.
pub(super) const CONNECTION_TIMEOUT: Duration = Duration::from_secs(15);
/// Connections open at once.
pub(super) const MAX_CONNECTIONS: usize = 32;
/// After answering, what the client still sends is read and dropped for this long (at most
/// [`MAX_DRAIN`] bytes) before the connection closes: closing with unread input would reset
/// the connection, and the client could lose the answer (a 400 or 431 in particular).
const DRAIN_TIMEOUT: Duration = Duration::from_secs(1);
const MAX_DRAIN: usize = 64 * 1024;

/// The open connections: those still waiting for a request head (oldest first, each with the
/// handle that closes it) and those serving one.
#[derive(Debug)]
struct Places {
    max: usize,
    waiting: BTreeMap<u64, AbortHandle>,
    serving: usize,
    next_id: u64,
}

type SharedPlaces = Arc<Mutex<Places>>;

fn lock(places: &SharedPlaces) -> std::sync::MutexGuard<'_, Places> {
    places.lock().unwrap_or_else(PoisonError::into_inner)
}

impl Places {
    fn new(max: usize) -> Places {
        Places {
            max,
            waiting: BTreeMap::new(),
            serving: 0,
            next_id: 0,
        }
    }

    /// Makes room for a new connection, closing the oldest one still waiting for its head if
    /// need be, and starts it with `start` (given its id, returning the handle that closes
    /// it). `false`: every place serves a request, the new connection is not started.
    fn admit(&mut self, start: impl FnOnce(u64) -> AbortHandle) -> bool {
        if self.waiting.len() + self.serving >= self.max {
            match self.waiting.pop_first() {
                Some((_, oldest)) => oldest.abort(),
                None => return false,
            }
        }
        let id = self.next_id;
        self.next_id += 1;
        // Started under the lock: the connection cannot look for itself before it is here.
        let handle = start(id);
        self.waiting.insert(id, handle);
        true
    }
}

/// A connection's place: waiting until its request head arrived, then serving; given back
/// when the connection ends (unless it was taken away to make room).
struct Place {
    places: SharedPlaces,
    id: u64,
    serving: std::sync::atomic::AtomicBool,
}

impl Place {
    /// The request head arrived: the connection may no longer be closed to make room.
    fn serve(&self) {
        let mut places = lock(&self.places);
        if places.waiting.remove(&self.id).is_some() {
            places.serving += 1;
            self.serving
                .store(true, std::sync::atomic::Ordering::Relaxed);
        }
    }
}

impl Drop for Place {
    fn drop(&mut self) {
        let mut places = lock(&self.places);
        if self.serving.load(std::sync::atomic::Ordering::Relaxed) {
            places.serving -= 1;
        } else {
            places.waiting.remove(&self.id);
        }
    }
}

/// Which cluster's metrics a scrape gets: the one this `schedd` serves now, if it leads.
pub(super) type MetricsOf = Arc<dyn Fn() -> Option<Arc<Cluster>> + Send + Sync>;

/// Serves `listener` until `stop` completes, with the metrics of the cluster `cluster` names
/// at each scrape (a replica that does not lead answers with a comment only).
pub(super) async fn serve(
    listener: TcpListener,
    cluster: MetricsOf,
    stop: impl Future<Output = ()>,
) {
    let places: SharedPlaces = Arc::new(Mutex::new(Places::new(MAX_CONNECTIONS)));
    tokio::pin!(stop);
    loop {
        let stream = tokio::select! {
            _ = &mut stop => return,
            accepted = listener.accept() => match accepted {
                Ok((stream, _)) => stream,
                Err(e) => {
                    // Out of file descriptors, most likely: let some close before trying again.
                    ysched_common::edge::peer_log::warn(
                        "accept failed",
                        "the metrics endpoint",
                        format_args!("metrics endpoint: accept failed: {e}"),
                    );
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    continue;
                }
            },
        };
        let places_for_task = places.clone();
        let cluster = cluster();
        // Not admitted: every place serves a request; the stream is dropped (closed) here.
        lock(&places).admit(move |id| {
            let place = Place {
                places: places_for_task,
                id,
                serving: Default::default(),
            };
            tokio::spawn(tcp_connection(stream, place, cluster)).abort_handle()
        });
    }
}

/// One TCP connection: its request answered, then what the client still sends drained.
async fn tcp_connection(stream: TcpStream, place: Place, cluster: Option<Arc<Cluster>>) {
    let stream = Arc::new(stream);
    let place = Arc::new(place);
    let render = move |format| async move {
        let Some(cluster) = cluster else {
            return "# this schedd replica does not lead: the leader's endpoint has the metrics\n"
                .to_string();
        };
        // The census takes the state lock for one pass over the jobs: not on a worker.
        tokio::task::spawn_blocking(move || cluster.metrics_text(format))
            .await
            .unwrap_or_default()
    };
    let served = {
        let place = place.clone();
        tokio::time::timeout(
            CONNECTION_TIMEOUT,
            answer(SharedTcp(stream.clone()), render, HEAD_TIMEOUT, move || {
                place.serve()
            }),
        )
        .await
    };
    if served.is_ok() {
        let _ = shutdown_write(&stream);
        drain(&stream).await;
    }
}

/// Answers one request on `io` (hyper, HTTP/1.x, `Connection: close`); `head_arrived` is
/// called when its head has. `render` produces the metrics in a format. Never panics,
/// whatever the client sends; hyper answers what it cannot parse (400, 431) itself.
pub(super) async fn answer<S, F, Fut>(
    io: S,
    render: F,
    head_timeout: Duration,
    head_arrived: impl Fn() + Send + Sync + 'static,
) where
    S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
    F: FnOnce(Format) -> Fut + Clone + Send + Sync + 'static,
    Fut: Future<Output = String> + Send,
{
    let head_arrived = Arc::new(head_arrived);
    let service = hyper::service::service_fn(move |request: Request<Incoming>| {
        head_arrived();
        let render = render.clone();
        async move { Ok::<_, std::convert::Infallible>(respond(&request, render).await) }
    });
    let _ = hyper::server::conn::http1::Builder::new()
        .timer(hyper_util::rt::TokioTimer::new())
        .header_read_timeout(head_timeout)
        .keep_alive(false)
        .title_case_headers(true)
        .max_buf_size(MAX_HEAD)
        .serve_connection(hyper_util::rt::TokioIo::new(io), service)
        .await;
}

/// The answer to one request.
async fn respond<F, Fut>(request: &Request<Incoming>, render: F) -> Response<Full<Bytes>>
where
    F: FnOnce(Format) -> Fut,
    Fut: Future<Output = String>,
{
    if request.uri().path() != "/metrics" {
        return plain(
            StatusCode::NOT_FOUND,
            "not found: this endpoint serves only /metrics\n",
        );
    }
    let head_only = match *request.method() {
        Method::GET => false,
        Method::HEAD => true,
        _ => {
            let mut answer = plain(
                StatusCode::METHOD_NOT_ALLOWED,
                "method not allowed: use GET /metrics\n",
            );
            answer
                .headers_mut()
                .insert(header::ALLOW, header::HeaderValue::from_static("GET, HEAD"));
            return answer;
        }
    };
    let accept = request
        .headers()
        .get(header::ACCEPT)
        .and_then(|v| v.to_str().ok());
    let format = Format::from_accept(accept);
    let body = render(format).await;
    let length = body.len();
    let mut answer = Response::new(Full::new(if head_only {
        Bytes::new()
    } else {
        Bytes::from(body)
    }));
    let headers = answer.headers_mut();
    headers.insert(
        header::CONTENT_TYPE,
        header::HeaderValue::from_static(format.content_type()),
    );
    headers.insert(header::CONTENT_LENGTH, length.into());
    answer
}

fn plain(status: StatusCode, text: &'static str) -> Response<Full<Bytes>> {
    let mut answer = Response::new(Full::new(Bytes::from_static(text.as_bytes())));
    *answer.status_mut() = status;
    answer.headers_mut().insert(
        header::CONTENT_TYPE,
        header::HeaderValue::from_static("text/plain; charset=utf-8"),
    );
    answer
}

/// A TCP stream that hyper reads and writes while the connection's task keeps it too, to
/// drain it once hyper is done.
struct SharedTcp(Arc<TcpStream>);

impl AsyncRead for SharedTcp {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        loop {
            ready!(self.0.poll_read_ready(cx))?;
            match self.0.try_read(buf.initialize_unfilled()) {
                Ok(n) => {
                    buf.advance(n);
                    return Poll::Ready(Ok(()));
                }
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => continue,
                Err(e) => return Poll::Ready(Err(e)),
            }
        }
    }
}

impl AsyncWrite for SharedTcp {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        loop {
            ready!(self.0.poll_write_ready(cx))?;
            match self.0.try_write(buf) {
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => continue,
                result => return Poll::Ready(result),
            }
        }
    }

    fn poll_flush(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Poll::Ready(Ok(()))
    }

    fn poll_shutdown(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Poll::Ready(shutdown_write(&self.0))
    }
}

/// Sends FIN: the client's read ends, while what it still sends can be read.
fn shutdown_write(stream: &TcpStream) -> std::io::Result<()> {
    // SAFETY: shutdown(2) on the stream's own descriptor, which it keeps open meanwhile.
    match unsafe { libc::shutdown(stream.as_raw_fd(), libc::SHUT_WR) } {
        0 => Ok(()),
        _ => Err(std::io::Error::last_os_error()),
    }
}

/// Reads and drops what the client still sends, for a moment and up to a limit.
async fn drain(stream: &TcpStream) {
    let _ = tokio::time::timeout(DRAIN_TIMEOUT, async {
        let mut sink = [0u8; 4096];
        let mut drained = 0;
        while drained < MAX_DRAIN {
            if stream.readable().await.is_err() {
                break;
            }
            match stream.try_read(&mut sink) {
                Ok(0) => break,
                Ok(n) => drained += n,
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => continue,
                Err(_) => break,
            }
        }
    })
    .await;
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    /// Sends `request` to [`answer`] and returns what it answered.
    async fn exchange(request: &[u8]) -> String {
        let (mut client, server) = tokio::io::duplex(64 * 1024);
        let task = tokio::spawn(answer(
            server,
            |format| async move { format!("metrics in {format:?}\n") },
            HEAD_TIMEOUT,
            || {},
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
        assert!(a.starts_with("HTTP/1.0 200 OK\r\n"), "{a}");
        assert!(a.ends_with("\r\n\r\nmetrics in Text\n"), "{a}");
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
            b"GET metrics HTTP/1.1\r\n\r\n",
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
            &b"hello\r\n\r\n"[..],
            b"GET /metrics\r\n\r\n",
            b"GET /metrics HTTP/2.0\r\n\r\n",
            b"GET /metrics HTTP/1.1 extra\r\n\r\n",
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
        let task = tokio::spawn(answer(
            server,
            |_| async { String::new() },
            HEAD_TIMEOUT,
            || {},
        ));
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
        let task = tokio::spawn(answer(
            server,
            |_| async { String::new() },
            HEAD_TIMEOUT,
            || {},
        ));
        client.write_all(b"GET /metr").await.unwrap();
        client.shutdown().await.unwrap();
        let mut answer = Vec::new();
        client.read_to_end(&mut answer).await.unwrap();
        task.await.unwrap();
        assert!(!String::from_utf8_lossy(&answer).contains(" 200 "));
    }

    #[tokio::test]
    async fn a_silent_client_is_dropped_after_the_head_timeout() {
        let (mut client, server) = tokio::io::duplex(1024);
        let timeout = Duration::from_millis(100);
        let task = tokio::spawn(answer(server, |_| async { String::new() }, timeout, || {}));
        client
            .write_all(b"GET /metrics HTTP/1.1\r\n")
            .await
            .unwrap();
        tokio::time::timeout(Duration::from_secs(5), task)
            .await
            .expect("dropped after its head timeout")
            .unwrap();
        let mut answer = Vec::new();
        client.read_to_end(&mut answer).await.unwrap();
        assert!(!String::from_utf8_lossy(&answer).contains(" 200 "));
    }

    #[tokio::test]
    async fn a_full_house_closes_the_oldest_connection_waiting_for_its_head() {
        let places: SharedPlaces = Arc::new(Mutex::new(Places::new(2)));
        let parked = || tokio::spawn(std::future::pending::<()>());
        let a = parked();
        let b = parked();
        assert!(lock(&places).admit(|_| a.abort_handle()));
        assert!(lock(&places).admit(|_| b.abort_handle()));
        // Full: the third takes the place of the oldest waiting one, a.
        let c = parked();
        assert!(lock(&places).admit(|_| c.abort_handle()));
        assert!(a.await.unwrap_err().is_cancelled());
        // b's head arrives: it serves, and can no longer be closed to make room.
        let b_place = Place {
            places: places.clone(),
            id: 1,
            serving: Default::default(),
        };
        b_place.serve();
        let d = parked();
        assert!(lock(&places).admit(|_| d.abort_handle()));
        assert!(c.await.unwrap_err().is_cancelled());
        // d's head arrives too: every place serves, a new connection is not taken.
        let d_place = Place {
            places: places.clone(),
            id: 3,
            serving: Default::default(),
        };
        d_place.serve();
        let e = parked();
        assert!(!lock(&places).admit(|_| e.abort_handle()));
        e.abort();
        // b is done: its place is free again.
        drop(b_place);
        let f = parked();
        assert!(lock(&places).admit(|_| f.abort_handle()));
        assert_eq!(lock(&places).serving, 1);
        drop(d_place);
        assert_eq!(lock(&places).serving, 0);
        b.abort();
        f.abort();
    }
}
