//! A client socket (schedd's, or an agent's) that admits at most so many live connections per
//! uid, and in all. Each accepted connection's uid is read from the kernel (`SO_PEERCRED`) at
//! accept; a connection over a limit is closed there and then, before any HTTP/2 state is
//! allocated for it, and logged (rate-limited, per uid, see [`super::peer_log`]). The count of
//! a uid goes down when its connection is dropped.
//!
//! Root (uid 0) is not limited: it can always get in to look at what is going on, however
//! many connections others hold.
//!
//! Accept errors (out of file descriptors) are logged and retried after a pause instead of
//! in a busy loop.
//!
//! Each request of a connection carries its [`ClientConnectInfo`]: the peer's credentials,
//! and what the connection's answers not yet read hold (see [`super::answers`]).

use super::answers::ConnectionAnswers;
use super::peer_log;
use std::collections::HashMap;
use std::future::Future;
use std::io;
use std::pin::Pin;
use std::sync::{Arc, Mutex, PoisonError};
use std::task::{ready, Context, Poll};
use std::time::Duration;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{UnixListener, UnixStream};
use tokio_stream::Stream;

/// How long to wait after a failed accept (`EMFILE`) before trying again.
const ACCEPT_RETRY: Duration = Duration::from_millis(100);
/// Connections refused in one go before the accept loop lets other tasks run.
const REFUSALS_PER_POLL: u32 = 64;

/// The limits of one client socket, with the config keys that set them (for messages).
#[derive(Debug, Clone)]
pub struct ConnectionLimits {
    /// Live connections of one uid.
    pub per_user: usize,
    pub per_user_key: &'static str,
    /// Live connections of all uids together (the exempt uid's not counted).
    pub total: usize,
    pub total_key: &'static str,
    /// A uid that is never limited nor counted: root (`Some(0)`).
    pub exempt_uid: Option<u32>,
}

#[derive(Debug, Default)]
struct Counts {
    per_uid: HashMap<u32, usize>,
    total: usize,
}

#[derive(Debug, Default)]
struct Shared(Mutex<Counts>);

impl Shared {
    fn lock(&self) -> std::sync::MutexGuard<'_, Counts> {
        self.0.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// One live connection's place in the counts, given back when the connection is dropped.
#[derive(Debug)]
struct Slot {
    shared: Arc<Shared>,
    uid: u32,
}

impl Drop for Slot {
    fn drop(&mut self) {
        let mut counts = self.shared.lock();
        counts.total = counts.total.saturating_sub(1);
        if let Some(n) = counts.per_uid.get_mut(&self.uid) {
            *n -= 1;
            if *n == 0 {
                counts.per_uid.remove(&self.uid);
            }
        }
    }
}

/// The accepted connections of a client socket that are within the limits, for
/// `tonic::transport::Server::serve_with_incoming`.
pub struct LimitedIncoming {
    listener: UnixListener,
    limits: ConnectionLimits,
    /// The socket, for messages.
    name: String,
    shared: Arc<Shared>,
    retry: Option<Pin<Box<tokio::time::Sleep>>>,
}

impl LimitedIncoming {
    /// Serves `listener` (named `name` in log lines) within `limits`.
    pub fn new(listener: UnixListener, name: String, limits: ConnectionLimits) -> Self {
        LimitedIncoming {
            listener,
            limits,
            name,
            shared: Arc::default(),
            retry: None,
        }
    }

    /// The live connections of `uid` that are counted.
    pub fn open_by(&self, uid: u32) -> usize {
        self.shared.lock().per_uid.get(&uid).copied().unwrap_or(0)
    }

    /// Admits `stream` or, over a limit, logs why not and drops it (closing it).
    fn admit(&self, stream: UnixStream) -> Option<ClientConnection> {
        let uid = match stream.peer_cred() {
            Ok(cred) => cred.uid(),
            Err(e) => {
                peer_log::warn(
                    "refused connection",
                    "an unknown peer",
                    format_args!(
                        "{}: refused a connection: cannot read its peer credentials: {e}",
                        self.name
                    ),
                );
                return None;
            }
        };
        if self.limits.exempt_uid == Some(uid) {
            return Some(ClientConnection {
                stream,
                answers: ConnectionAnswers::default(),
                _slot: None,
            });
        }
        let refusal = {
            let mut counts = self.shared.lock();
            let mine = counts.per_uid.get(&uid).copied().unwrap_or(0);
            if mine >= self.limits.per_user {
                Some(format!(
                    "it has {mine} open, the limit per user is {} ({})",
                    self.limits.per_user, self.limits.per_user_key
                ))
            } else if counts.total >= self.limits.total {
                Some(format!(
                    "{} connections are open, the limit is {} ({})",
                    counts.total, self.limits.total, self.limits.total_key
                ))
            } else {
                *counts.per_uid.entry(uid).or_default() += 1;
                counts.total += 1;
                None
            }
        };
        match refusal {
            None => Some(ClientConnection {
                stream,
                answers: ConnectionAnswers::default(),
                _slot: Some(Slot {
                    shared: self.shared.clone(),
                    uid,
                }),
            }),
            Some(why) => {
                peer_log::warn(
                    "refused connection",
                    &format!("uid {uid}"),
                    format_args!("{}: refused a connection of uid {uid}: {why}", self.name),
                );
                None
            }
        }
    }
}

impl Stream for LimitedIncoming {
    type Item = io::Result<ClientConnection>;

    fn poll_next(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        let this = self.get_mut();
        let mut refused = 0;
        loop {
            if let Some(retry) = this.retry.as_mut() {
                ready!(retry.as_mut().poll(cx));
                this.retry = None;
            }
            if refused >= REFUSALS_PER_POLL {
                // A flood of refusals must not hold this worker thread: come back later.
                cx.waker().wake_by_ref();
                return Poll::Pending;
            }
            match ready!(this.listener.poll_accept(cx)) {
                Ok((stream, _)) => match this.admit(stream) {
                    Some(connection) => return Poll::Ready(Some(Ok(connection))),
                    None => refused += 1,
                },
                Err(e) => {
                    peer_log::warn(
                        "accept failed",
                        &this.name,
                        format_args!("{}: accept failed: {e}; retrying shortly", this.name),
                    );
                    this.retry = Some(Box::pin(tokio::time::sleep(ACCEPT_RETRY)));
                }
            }
        }
    }
}

/// An admitted client connection: the socket, what its answers not yet read hold, and its
/// place in the counts while it lives.
#[derive(Debug)]
pub struct ClientConnection {
    stream: UnixStream,
    answers: ConnectionAnswers,
    _slot: Option<Slot>,
}

/// What each request of a client connection carries in its extensions: the kernel's word on
/// the peer, and the connection's answers not yet read (one count for all its requests).
#[derive(Debug, Clone)]
pub struct ClientConnectInfo {
    pub uds: tonic::transport::server::UdsConnectInfo,
    pub answers: ConnectionAnswers,
}

impl ClientConnectInfo {
    /// The peer's credentials as the kernel gave them at accept (`SO_PEERCRED`).
    pub fn peer_cred(&self) -> Option<tokio::net::unix::UCred> {
        self.uds.peer_cred
    }
}

impl tonic::transport::server::Connected for ClientConnection {
    type ConnectInfo = ClientConnectInfo;

    fn connect_info(&self) -> Self::ConnectInfo {
        ClientConnectInfo {
            uds: self.stream.connect_info(),
            answers: self.answers.clone(),
        }
    }
}

impl AsyncRead for ClientConnection {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().stream).poll_read(cx, buf)
    }
}

impl AsyncWrite for ClientConnection {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.get_mut().stream).poll_write(cx, buf)
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.get_mut().stream).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.stream.is_write_vectored()
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().stream).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().stream).poll_shutdown(cx)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::AsyncReadExt;
    use tokio_stream::StreamExt;

    fn limits(per_user: usize, total: usize, exempt_uid: Option<u32>) -> ConnectionLimits {
        ConnectionLimits {
            per_user,
            per_user_key: "test.per_user",
            total,
            total_key: "test.total",
            exempt_uid,
        }
    }

    /// Whether the server closed `client` (EOF) rather than keeping it open.
    async fn closed(client: &mut UnixStream) -> bool {
        let mut buf = [0u8; 1];
        match tokio::time::timeout(Duration::from_millis(200), client.read(&mut buf)).await {
            Ok(Ok(0)) | Ok(Err(_)) => true,
            Ok(Ok(_)) => panic!("the server wrote something"),
            Err(_) => false,
        }
    }

    #[tokio::test]
    async fn connections_over_a_users_limit_are_closed_and_counted_down_when_dropped() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("s.sock");
        let me = nix::unistd::getuid().as_raw();
        let mut incoming = LimitedIncoming::new(
            UnixListener::bind(&path).unwrap(),
            "test socket".into(),
            limits(2, 10, None),
        );
        let mut clients = Vec::new();
        let mut admitted = Vec::new();
        for _ in 0..2 {
            clients.push(UnixStream::connect(&path).await.unwrap());
            admitted.push(incoming.next().await.unwrap().unwrap());
        }
        assert_eq!(incoming.open_by(me), 2);
        // The third is closed at accept: the stream yields nothing for it.
        let mut third = UnixStream::connect(&path).await.unwrap();
        let next = tokio::time::timeout(Duration::from_millis(200), incoming.next()).await;
        assert!(next.is_err(), "a third connection was admitted");
        assert!(closed(&mut third).await);
        assert!(!closed(&mut clients[0]).await);
        // One goes away: there is room again.
        admitted.pop();
        assert_eq!(incoming.open_by(me), 1);
        let _fourth = UnixStream::connect(&path).await.unwrap();
        let _admitted = incoming.next().await.unwrap().unwrap();
        assert_eq!(incoming.open_by(me), 2);
    }

    #[tokio::test]
    async fn the_total_limit_holds_and_the_exempt_uid_is_not_counted() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("s.sock");
        let me = nix::unistd::getuid().as_raw();
        let mut incoming = LimitedIncoming::new(
            UnixListener::bind(&path).unwrap(),
            "test socket".into(),
            limits(10, 1, None),
        );
        let _first = UnixStream::connect(&path).await.unwrap();
        let _admitted = incoming.next().await.unwrap().unwrap();
        let mut second = UnixStream::connect(&path).await.unwrap();
        assert!(
            tokio::time::timeout(Duration::from_millis(200), incoming.next())
                .await
                .is_err()
        );
        assert!(closed(&mut second).await);

        let mut exempt = LimitedIncoming::new(
            UnixListener::bind(dir.path().join("e.sock")).unwrap(),
            "exempt socket".into(),
            limits(1, 1, Some(me)),
        );
        let (mut held, mut admitted) = (Vec::new(), Vec::new());
        for _ in 0..5 {
            held.push(
                UnixStream::connect(dir.path().join("e.sock"))
                    .await
                    .unwrap(),
            );
            admitted.push(exempt.next().await.unwrap().unwrap());
        }
        assert_eq!(exempt.open_by(me), 0);
    }
}
