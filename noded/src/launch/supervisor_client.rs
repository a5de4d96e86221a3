//! noded's side of the node protocol: reaching the node's supervisor (started when none runs),
//! keeping it running, and what noded asks of it (see [`super::node_protocol`]).

use super::node_protocol::{BadLine, Reply, Request};
use super::process::{Announcement, SupervisorWriter};
use super::spool::{self, FinishedRecord, JobRecord};
use super::{node_supervisor, until_cancelled, Launcher, Shared};
use std::io;
use std::os::unix::net::UnixStream;
use std::time::Duration;
use tokio::sync::mpsc;

/// How long after the node's supervisor went away it is started again (see
/// [`Launcher::keep_supervisor`]); doubled after each failure to start it.
const SUPERVISOR_RESTART: Duration = Duration::from_secs(1);

/// How long a blocking thread waits for the supervisor's answer to a request from it (see
/// [`Shared::running_supervisor`]).
const BLOCKING_ANSWER: Duration = Duration::from_secs(10);

/// Records a job's end that its supervisor did not see (its launch failed before it was
/// handed over, the supervisor went away, or the spool was full) in the node's journal,
/// through the supervisor on `connection` (blocking): `record`, answered once synced.
pub(super) fn record_end(mut connection: UnixStream, finished: &FinishedRecord) -> io::Result<()> {
    use std::io::{BufRead, Write};
    let request = Request::Record(finished.clone()).to_line();
    connection.write_all(request.map_err(io::Error::other)?.as_bytes())?;
    let mut answer = String::new();
    if std::io::BufReader::new(connection).read_line(&mut answer)? == 0 {
        return Err(io::Error::other("the supervisor closed the connection"));
    }
    let answer = answer.trim_end();
    match Reply::parse(answer) {
        Ok(Reply::Recorded) => Ok(()),
        Ok(Reply::Failed(why)) => Err(io::Error::other(why)),
        _ => Err(io::Error::other(answer.to_string())),
    }
}

impl Shared {
    /// Runs `exchange`, a blocking exchange with the node's supervisor (started if none
    /// runs), on a blocking thread, from an async task. Should the task be dropped meanwhile
    /// (the launcher was), the connection is shut down, which ends the exchange.
    pub(super) async fn on_blocking_thread<T: Send + 'static>(
        &self,
        exchange: impl FnOnce(UnixStream) -> io::Result<T> + Send + 'static,
    ) -> io::Result<T> {
        let connection = self.connect_supervisor(true).await?.into_std()?;
        connection.set_nonblocking(false)?;
        let shut_down_when_dropped = ShutDownOnDrop(connection.try_clone()?);
        let result = tokio::task::spawn_blocking(move || exchange(connection)).await;
        drop(shut_down_when_dropped);
        result.map_err(io::Error::other)?
    }

    /// A blocking connection to a supervisor that runs already (none is started), whose
    /// answers are waited for at most [`BLOCKING_ANSWER`]: for a blocking thread.
    pub(super) fn running_supervisor(&self) -> io::Result<UnixStream> {
        let connection = UnixStream::connect(self.socket.path())?;
        connection.set_read_timeout(Some(BLOCKING_ANSWER))?;
        Ok(connection)
    }

    /// A connection to the node's supervisor; with `start`, the supervisor is started first
    /// when none answers (it exits when idle, see [`node_supervisor::IDLE_EXIT`]).
    pub(super) async fn connect_supervisor(
        &self,
        start: bool,
    ) -> io::Result<tokio::net::UnixStream> {
        let path = self.socket.path();
        match tokio::net::UnixStream::connect(path).await {
            Ok(stream) => return Ok(stream),
            Err(e) if !start => return Err(e),
            Err(_) => {}
        }
        let _starting = self.starting_supervisor.lock().await;
        if let Ok(stream) = tokio::net::UnixStream::connect(path).await {
            return Ok(stream);
        }
        self.start_supervisor()?;
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        loop {
            tokio::time::sleep(Duration::from_millis(5)).await;
            match tokio::net::UnixStream::connect(path).await {
                Ok(stream) => return Ok(stream),
                Err(e) if std::time::Instant::now() > deadline => {
                    return Err(io::Error::new(
                        e.kind(),
                        format!(
                            "the supervisor did not come up on {}: {e}",
                            self.spool
                                .root()
                                .join(node_supervisor::SOCKET_FILE)
                                .display()
                        ),
                    ))
                }
                Err(_) => {}
            }
        }
    }

    /// Starts `noded __supervisor <spool>`: spawned without a fork of this many-threaded
    /// process (no `pre_exec`: the supervisor makes its own session), its stderr its log.
    /// It inherits noded's environment (an `LD_PRELOAD` a test gave noded included); jobs
    /// never do, their environment is their plan's.
    fn start_supervisor(&self) -> io::Result<()> {
        use std::os::unix::fs::OpenOptionsExt;
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .mode(spool::FILE_MODE)
            .open(self.spool.root().join(node_supervisor::LOG_FILE))?;
        // One an older noded left 0644 too: it quotes jobs' launches.
        log.set_permissions(std::os::unix::fs::PermissionsExt::from_mode(
            spool::FILE_MODE,
        ))?;
        let mut child = tokio::process::Command::new(&self.supervisor_program)
            .arg0("noded")
            .arg(node_supervisor::SUPERVISOR_SUBCOMMAND)
            .arg(self.spool.root())
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::null())
            .stderr(log)
            .kill_on_drop(false)
            .spawn()?;
        tracing::info!("started the node's supervisor, pid {:?}", child.id());
        ysched_common::stamp::stamp("n.spawned_supervisor", 0);
        // Reaped when it exits (idle), so that it leaves no zombie.
        tokio::spawn(async move {
            let _ = child.wait().await;
        });
        Ok(())
    }

    /// Tells the supervisor that schedd recorded job `job_id`'s end: on the keep-alive
    /// connection while it is open (no connection per job), else on a connection of its own.
    pub(super) fn tell_acked(self: &std::sync::Arc<Self>, job_id: u64) {
        let linked = self
            .ack_link()
            .as_ref()
            .is_some_and(|link| link.send(job_id).is_ok());
        if linked {
            return;
        }
        if let Ok(runtime) = tokio::runtime::Handle::try_current() {
            let shared = self.clone();
            runtime.spawn(async move {
                use tokio::io::AsyncWriteExt;
                // No supervisor running: it replays the end at its next start, and a
                // restarted noded reports it again.
                let ack = Request::Ack { job_id }.to_line();
                if let (Ok(mut stream), Ok(ack)) = (shared.connect_supervisor(false).await, ack) {
                    let _ = stream.write_all(ack.as_bytes()).await;
                }
            });
        }
    }
}

/// Shuts a connection down when dropped, which ends a blocking read on it elsewhere.
struct ShutDownOnDrop(UnixStream);

impl Drop for ShutDownOnDrop {
    fn drop(&mut self) {
        let _ = self.0.shutdown(std::net::Shutdown::Both);
    }
}

impl Launcher {
    /// Keeps the node's supervisor running while this launcher lives (not on a login node):
    /// a task holds a connection to it, on which nothing is said, so that it never sits
    /// idle and exits (see [`node_supervisor::IDLE_EXIT`]). Else a job submitted to an idle
    /// node would wait for a supervisor to be started, every time. When the supervisor goes
    /// (killed, or its host's power), the task starts it again a moment later. Started once,
    /// by the first call: the first launch, or a recovery that found a supervisor or a
    /// journal (a node that never ran a job starts none); stopped when the launcher is
    /// dropped.
    pub(super) fn keep_supervisor(&self) {
        use std::sync::atomic::Ordering;
        if !self.shared.runs_jobs || self.shared.keeping_supervisor.swap(true, Ordering::SeqCst) {
            return;
        }
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            self.shared
                .keeping_supervisor
                .store(false, Ordering::SeqCst);
            return;
        };
        let shared = self.shared.clone();
        runtime.spawn(until_cancelled(self.supervision.clone(), async move {
            let mut retry = SUPERVISOR_RESTART;
            loop {
                match shared.connect_supervisor(true).await {
                    Ok(stream) => {
                        retry = SUPERVISOR_RESTART;
                        hold_supervisor(&shared, stream).await;
                        tracing::debug!("the node's supervisor went away");
                    }
                    Err(e) => {
                        tracing::warn!("cannot keep the node's supervisor running: {e}");
                        retry = (retry * 2).min(SUPERVISOR_RESTART * 30);
                    }
                }
                tokio::time::sleep(retry).await;
            }
        }));
    }

    /// Asks the node's supervisor to follow job `job_id` again: its connection, or `None`
    /// when no supervisor runs or it does not know the job. An end the supervisor recorded
    /// meanwhile comes as the connection's first line (`ended <json>`).
    pub(super) async fn attach(&self, job_id: u64) -> Option<(Announcement, SupervisorWriter)> {
        use tokio::io::{AsyncBufReadExt, AsyncWriteExt};
        let stream = self.shared.connect_supervisor(false).await.ok()?;
        let (read, mut write) = stream.into_split();
        let attach = Request::Attach { job_id }.to_line().ok()?;
        write.write_all(attach.as_bytes()).await.ok()?;
        let lines = tokio::io::BufReader::new(read).lines();
        // The answer (`attached`, `ended`, `unknown`) is read by the job's task: a
        // supervisor that does not answer at once (stopped, busy) hangs no recovery.
        Some((lines, write))
    }
}

/// Asks the node's supervisor for the jobs it runs and the ends schedd has not acknowledged
/// (`list`, see [`node_supervisor`]).
pub(super) async fn list_jobs(
    stream: tokio::net::UnixStream,
) -> io::Result<(Vec<JobRecord>, Vec<FinishedRecord>)> {
    use tokio::io::{AsyncBufReadExt, AsyncWriteExt};
    let (read, mut write) = stream.into_split();
    let list = Request::List.to_line().map_err(io::Error::other)?;
    write.write_all(list.as_bytes()).await?;
    let mut lines = tokio::io::BufReader::new(read).lines();
    let mut running = Vec::new();
    let mut ended = Vec::new();
    loop {
        let line = lines
            .next_line()
            .await?
            .ok_or_else(|| io::Error::other("the node's supervisor closed its list"))?;
        match Reply::parse(&line) {
            Ok(Reply::Job(record)) => running.push(*record),
            Ok(Reply::Ended(finished)) => ended.push(finished),
            Ok(Reply::Done) => return Ok((running, ended)),
            Err(BadLine::Unreadable { why, .. }) => {
                return Err(io::Error::new(
                    io::ErrorKind::InvalidData,
                    format!("{line:?}: {why}"),
                ))
            }
            _ => tracing::warn!("unexpected line from the node's supervisor: {line:?}"),
        }
    }
}

/// Holds the keep-alive connection to the node's supervisor until the supervisor goes
/// (nothing comes on it: its read ends then), and writes on it the acknowledgements
/// [`Launcher::ack`] passes, those that came meanwhile in one write.
async fn hold_supervisor(shared: &Shared, stream: tokio::net::UnixStream) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let (mut read, mut write) = stream.into_split();
    let (link, mut acks) = mpsc::unbounded_channel();
    *shared.ack_link() = Some(link);
    let mut buf = [0u8; 64];
    loop {
        tokio::select! {
            read = read.read(&mut buf) => if !matches!(read, Ok(n) if n > 0) {
                break;
            },
            Some(job_id) = acks.recv() => {
                let mut acked = vec![job_id];
                while let Ok(job_id) = acks.try_recv() {
                    acked.push(job_id);
                }
                let lines: String = acked
                    .into_iter()
                    .filter_map(|job_id| Request::Ack { job_id }.to_line().ok())
                    .collect();
                if write.write_all(lines.as_bytes()).await.is_err() {
                    break;
                }
            }
        }
    }
    *shared.ack_link() = None;
}
