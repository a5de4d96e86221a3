//! A client that asks and never reads: on each of many connections (connected already, as the
//! attacking user: see [`crate::connect_as`]), a few listings in flight whose answers it never
//! reads. Its HTTP/2 window is 0, so not one byte of an answer can reach it; what it sees is
//! each request refused (its status comes in headers, which no window holds back) or left
//! hanging, with the daemon holding the answer for it.

use std::os::unix::net::UnixStream;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use tonic::transport::{Channel, Endpoint, Uri};
use ysched_proto as pb;

/// The listing an attacker asks for: every job ever, from the history by end time.
pub fn whole_history() -> pb::ListJobsRequest {
    pb::ListJobsRequest {
        all: true,
        since_ms: 1,
        ..Default::default()
    }
}

/// What became of the requests so far.
#[derive(Debug, Default)]
pub struct Tally {
    pub sent: AtomicUsize,
    /// Refused with `RESOURCE_EXHAUSTED`.
    pub refused: AtomicUsize,
    /// Failed otherwise (the connection refused or closed, another status).
    pub failed: AtomicUsize,
    /// Answered whole (an empty answer fits a window of 0).
    pub answered: AtomicUsize,
    /// Connections on which HTTP/2 could not even start (closed at accept: over a limit).
    pub connections_lost: AtomicUsize,
    pub first_refusal: Mutex<String>,
    pub first_failure: Mutex<String>,
}

impl Tally {
    /// Requests that are over, one way or another: the rest are held unread.
    pub fn settled(&self) -> usize {
        self.refused.load(Ordering::Relaxed)
            + self.failed.load(Ordering::Relaxed)
            + self.answered.load(Ordering::Relaxed)
    }

    /// One line of what happened, for reports.
    pub fn line(&self) -> String {
        format!(
            "{} listings asked, {} refused (RESOURCE_EXHAUSTED), {} failed otherwise, {} \
             answered, {} held unread{}",
            self.sent.load(Ordering::Relaxed),
            self.refused.load(Ordering::Relaxed),
            self.failed.load(Ordering::Relaxed),
            self.answered.load(Ordering::Relaxed),
            self.sent.load(Ordering::Relaxed) - self.settled(),
            match self.first_failure.lock().unwrap().as_str() {
                "" => String::new(),
                failure => format!(" (first failure: {failure})"),
            }
        )
    }
}

/// Requests in flight that are never read; dropping it closes every connection.
pub struct UnreadListings {
    pub tally: Arc<Tally>,
    _runtime: tokio::runtime::Runtime,
}

impl UnreadListings {
    /// Opens HTTP/2 (window 0) on each of `connections` and sends `per_connection` copies of
    /// `request` on each, never reading an answer; with `again`, a request refused or failed
    /// is sent again after that pause, for as long as this lives.
    pub fn start(
        connections: Vec<UnixStream>,
        per_connection: usize,
        request: pb::ListJobsRequest,
        again: Option<std::time::Duration>,
    ) -> UnreadListings {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .enable_all()
            .build()
            .unwrap();
        let tally = Arc::new(Tally::default());
        for stream in connections {
            let (tally, request) = (Arc::clone(&tally), request.clone());
            runtime.spawn(async move {
                let channel = match unread_channel(stream).await {
                    Ok(channel) => channel,
                    Err(e) => {
                        tally.connections_lost.fetch_add(1, Ordering::Relaxed);
                        tally.sent.fetch_add(per_connection, Ordering::Relaxed);
                        tally.failed.fetch_add(per_connection, Ordering::Relaxed);
                        note(&tally.first_failure, format!("connect: {e}"));
                        return;
                    }
                };
                for _ in 0..per_connection {
                    let (tally, request) = (Arc::clone(&tally), request.clone());
                    let mut client = pb::ysched_client::YschedClient::new(channel.clone())
                        .max_decoding_message_size(usize::MAX);
                    tokio::spawn(async move {
                        loop {
                            tally.sent.fetch_add(1, Ordering::Relaxed);
                            match client.list_jobs(request.clone()).await {
                                Ok(_) => tally.answered.fetch_add(1, Ordering::Relaxed),
                                Err(s) if s.code() == tonic::Code::ResourceExhausted => {
                                    note(&tally.first_refusal, s.message().to_string());
                                    tally.refused.fetch_add(1, Ordering::Relaxed)
                                }
                                Err(s) => {
                                    note(&tally.first_failure, format!("{s:?}"));
                                    tally.failed.fetch_add(1, Ordering::Relaxed)
                                }
                            };
                            match again {
                                Some(pause) => tokio::time::sleep(pause).await,
                                None => return,
                            }
                        }
                    });
                }
            });
        }
        UnreadListings {
            tally,
            _runtime: runtime,
        }
    }
}

fn note(slot: &Mutex<String>, text: String) {
    let mut slot = slot.lock().unwrap();
    if slot.is_empty() {
        *slot = text;
    }
}

/// An HTTP/2 connection on `stream` whose streams' windows are 0: the server may send
/// headers, never data.
async fn unread_channel(stream: UnixStream) -> Result<Channel, tonic::transport::Error> {
    stream.set_nonblocking(true).unwrap();
    let slot = Arc::new(Mutex::new(Some(stream)));
    Endpoint::from_static("http://[::]:50051")
        .initial_stream_window_size(Some(0))
        .connect_with_connector(tower::service_fn(move |_: Uri| {
            let stream = slot.lock().unwrap().take();
            async move {
                let stream = stream.ok_or_else(|| std::io::Error::other("used once only"))?;
                Ok::<_, std::io::Error>(hyper_util::rt::TokioIo::new(
                    tokio::net::UnixStream::from_std(stream)?,
                ))
            }
        }))
        .await
}
