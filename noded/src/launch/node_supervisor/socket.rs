//! The supervisor's socket: who may connect, reading requests, and answering them.
//!
//! noded talks to it over a Unix socket, `<spool>/supervisor.sock` (mode 0600; a peer other
//! than root or the supervisor's own user, as `SO_PEERCRED` names it, is refused). A socket
//! rather than inherited pipes: a restarted noded finds it by its path, with no state handed
//! over. One connection per job, and one per request otherwise (acknowledgements aside, see
//! `ack`), one line each way:
//! - `launch <JobRecord json>`: record the launch (synced) and start the job. The supervisor
//!   answers `started <pid> <time_ms>` once it has exec'd, and `ended <FinishedRecord json>`
//!   once it is over and its end synced, then closes; `refused <why>` when the launch cannot
//!   be recorded (a full spool: nothing was started).
//!   Without a cgroup, `gone` comes as soon as the job's process group is seen empty, before
//!   its end is recorded: noded signals that group's number no more (it may be reused).
//! - `attach <job id>`: a restarted noded following a job: `attached` (then as above),
//!   `ended <json>` (it ended meanwhile), or `unknown`.
//! - `stop <StopState json>`, on a job's connection: noded's stop progress, before its first
//!   signal (the others then keep their grace when the main process ends). Journaled, not
//!   synced.
//! - `record <FinishedRecord json>`: an end noded made (a launch that failed before it was
//!   handed over): `recorded` once synced, or `failed <why>`.
//! - `list`: `job <JobRecord json>` per job it runs, `ended <json>` per end schedd has not
//!   acknowledged, then `done`.
//! - `ack <job id>`: schedd recorded the job's end: journaled, not synced. noded sends these
//!   on the connection it holds open (see the supervisor's docs), several in one write when
//!   they came together.
//!
//! Each message is typed in [`crate::launch::node_protocol`], which keeps this encoding.

use super::{log, sys, Supervisor};
use crate::launch::journal::Entry;
use crate::launch::node_protocol::{self, BadLine, Reply, Request};
use crate::launch::spool::{FinishedRecord, StopState, FILE_MODE};
use std::fs::File;
use std::io::{self, Read, Write};
use std::os::fd::AsRawFd;
use std::os::unix::fs::PermissionsExt;
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::time::Duration;

/// The longest path a Unix socket's address holds (`sun_path`, with its NUL).
const SUN_PATH_MAX: usize = 108;

/// Where the supervisor's socket is reached: its path, or where that is too long for a
/// socket's address (108 bytes), the same through `/proc/self/fd/<spool dir>`, valid while
/// this holds the spool directory open.
pub struct SocketAddress {
    path: PathBuf,
    _dir: Option<File>,
}

impl SocketAddress {
    pub fn of_spool(spool: &Path) -> io::Result<SocketAddress> {
        let path = spool.join(SOCKET_FILE);
        if path.as_os_str().len() < SUN_PATH_MAX {
            return Ok(SocketAddress { path, _dir: None });
        }
        let dir = File::open(spool)?;
        let path = PathBuf::from(format!("/proc/self/fd/{}/{SOCKET_FILE}", dir.as_raw_fd()));
        Ok(SocketAddress {
            path,
            _dir: Some(dir),
        })
    }

    /// The path to bind or connect to (short enough).
    pub fn path(&self) -> &Path {
        &self.path
    }
}

/// The supervisor's socket, in the spool's root.
pub const SOCKET_FILE: &str = "supervisor.sock";

/// The longest request line: a launch carries the job's script, environment and arguments
/// (schedd bounds them at 2 × `scheduler.max_script_mib` + 2 MiB), as JSON.
const MAX_LINE: usize = crate::launch::journal::MAX_RECORD_BYTES;

pub(super) fn listen(spool: &Path) -> io::Result<UnixListener> {
    let path = spool.join(SOCKET_FILE);
    // Left by a supervisor that died: the lock says none runs now.
    match std::fs::remove_file(&path) {
        Err(e) if e.kind() != io::ErrorKind::NotFound => return Err(e),
        _ => {}
    }
    let address = SocketAddress::of_spool(spool)?;
    let listener = UnixListener::bind(address.path())?;
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(FILE_MODE))?;
    listener.set_nonblocking(true)?;
    Ok(listener)
}

pub(super) struct Connection {
    pub(super) stream: UnixStream,
    pub(super) input: Vec<u8>,
    /// How much of `input` holds no end of line.
    pub(super) scanned: usize,
    /// The job this connection follows, once it asked.
    pub(super) job: Option<u64>,
}

impl Supervisor {
    pub(super) fn accept(&mut self) {
        loop {
            let stream = match self.listener.accept() {
                Ok((stream, _)) => stream,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return,
                Err(e) => return log(&format!("accept: {e}")),
            };
            // Only root and the supervisor's own user (noded's) may start jobs.
            let me = nix::unistd::Uid::effective().as_raw();
            match sys::peer_uid(&stream) {
                Ok(uid) if uid == 0 || uid == me => {}
                Ok(uid) => {
                    log(&format!("refused a connection of uid {uid}"));
                    continue;
                }
                Err(e) => {
                    log(&format!("SO_PEERCRED: {e}"));
                    continue;
                }
            }
            if let Err(e) = stream.set_nonblocking(true) {
                log(&format!("cannot make a connection non-blocking: {e}"));
                continue;
            }
            self.connections.insert(
                self.next_connection,
                Connection {
                    stream,
                    input: Vec::new(),
                    scanned: 0,
                    job: None,
                },
            );
            self.next_connection += 1;
        }
    }

    pub(super) fn read_connection(&mut self, id: u64) {
        let Some(connection) = self.connections.get_mut(&id) else {
            return;
        };
        let buf = &mut self.read_buf;
        let closed = loop {
            match connection.stream.read(buf) {
                Ok(0) => break true,
                Ok(n) => connection.input.extend_from_slice(&buf[..n]),
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => break false,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(_) => break true,
            }
        };
        let mut lines = Vec::new();
        // Only what came since the last look is searched: a launch's line can be megabytes.
        while let Some(end) = connection.input[connection.scanned..]
            .iter()
            .position(|&b| b == b'\n')
            .map(|at| connection.scanned + at)
        {
            let line: Vec<u8> = connection.input.drain(..=end).collect();
            lines.push(String::from_utf8_lossy(&line[..end]).into_owned());
            connection.scanned = 0;
        }
        connection.scanned = connection.input.len();
        let garbage = connection.input.len() > MAX_LINE;
        // What came before the end of the connection is served (an `ack`, then closed).
        for line in lines {
            self.request(id, &line);
        }
        if closed || garbage {
            // noded went away (or sent garbage): the job goes on without it.
            self.connections.remove(&id);
        }
    }

    pub(super) fn request(&mut self, id: u64, line: &str) {
        let request = match Request::parse(line) {
            Ok(request) => request,
            Err(bad) => return self.bad_request(id, line, bad),
        };
        match request {
            Request::Launch(record) => {
                ysched_common::stamp::stamp("s.launch_req", record.job.job_id);
                self.launch(id, *record)
            }
            Request::Attach { job_id } => self.attach(id, job_id),
            Request::Stop(stop) => self.stop(id, stop),
            Request::Record(finished) => {
                let receipt = self.journal.append(Entry::Ended(finished));
                self.recording.push((id, receipt));
            }
            Request::List => self.list(id),
            Request::Ack { job_id } => {
                let _ = self.journal.append(Entry::Acked { job_id });
            }
        }
    }

    /// A request that does not read: refused where noded waits for an answer, else said in
    /// the log (an acknowledgement that does not read is dropped: the end is reported again).
    pub(super) fn bad_request(&mut self, id: u64, line: &str, bad: BadLine) {
        match bad {
            BadLine::Unknown => {
                log(&format!("unknown request {line:?}"));
                self.connections.remove(&id);
            }
            BadLine::Unreadable { verb, why } => match verb {
                node_protocol::LAUNCH => self.refuse(id, &format!("unreadable launch: {why}")),
                node_protocol::ATTACH => self.refuse(id, &why),
                node_protocol::STOP => log(&format!("unreadable stop progress: {why}")),
                node_protocol::RECORD => {
                    self.reply(id, &Reply::Failed(format!("unreadable end: {why}")));
                    self.connections.remove(&id);
                }
                _ => {}
            },
        }
    }

    pub(super) fn refuse(&mut self, id: u64, why: &str) {
        log(&format!("refused: {why}"));
        self.reply(id, &Reply::Refused(why.to_string()));
        self.connections.remove(&id);
    }

    /// A restarted noded follows a job: `attached`, `ended` if it ended meanwhile, or
    /// `unknown`.
    pub(super) fn attach(&mut self, id: u64, job_id: u64) {
        let following = self.jobs.contains_key(&job_id)
            || self.launching.iter().any(|l| l.record.job.job_id == job_id)
            || self.checking.iter().any(|c| c.record.job.job_id == job_id)
            || self.ending.iter().any(|e| e.finished.job_id == job_id);
        if following {
            self.reply(id, &Reply::Attached);
            self.follow(id, job_id);
            let over = self
                .checking
                .iter()
                .map(|c| &c.record)
                .chain(self.ending.iter().map(|e| &e.record))
                .find(|record| record.job.job_id == job_id);
            if over.is_some_and(|record| record.plan.as_ref().is_none_or(|p| p.cgroup.is_none())) {
                self.say_group_gone(job_id);
            }
            return;
        }
        let ended = self
            .journal
            .with_live(|live| live.jobs.get(&job_id).and_then(|j| j.ended.clone()));
        match ended {
            Some(finished) => self.reply(id, &Reply::Ended(finished)),
            None => self.reply(id, &Reply::Unknown),
        }
        self.connections.remove(&id);
    }

    /// Tells the connections following a job without a cgroup that its process group is
    /// empty (`gone`), as soon as it is seen so: its end may take a while to be recorded (a
    /// checkpoint directory to look at, the journal's sync), and from now on the group's
    /// number may be taken by a new group, which noded must not signal.
    pub(super) fn say_group_gone(&mut self, job_id: u64) {
        for id in self.followers(job_id) {
            self.reply(id, &Reply::Gone);
        }
    }

    /// noded's stop progress for the job its connection follows.
    pub(super) fn stop(&mut self, id: u64, stop: StopState) {
        let Some(job_id) = self.connections.get(&id).and_then(|c| c.job) else {
            return;
        };
        if let Some(job) = self.jobs.get_mut(&job_id) {
            if stop.term_time_ms > 0 || stop.kill_sent {
                job.stop_notice = Some(stop.term_time_ms);
            }
            job.record.stop = stop.clone();
        } else if let Some(launching) = self
            .launching
            .iter_mut()
            .find(|l| l.record.job.job_id == job_id)
        {
            launching.record.stop = stop.clone();
        }
        let _ = self.journal.append(Entry::Stop { job_id, stop });
    }

    /// The jobs it runs and the ends schedd has not acknowledged, for a restarted noded.
    pub(super) fn list(&mut self, id: u64) {
        let mut lines = String::new();
        let running = self
            .jobs
            .values()
            .map(|job| {
                let mut record = job.record.clone();
                if job.announced {
                    record.job_pid = Some(job.pid);
                }
                record
            })
            .chain(self.launching.iter().map(|l| l.record.clone()))
            // Ended, but not yet told: a restarted noded attaches and is told then.
            .chain(self.checking.iter().map(|c| c.record.clone()))
            .chain(self.ending.iter().map(|e| e.record.clone()));
        for record in running {
            if let Ok(line) = Reply::Job(Box::new(record)).to_line() {
                lines.push_str(&line);
            }
        }
        let ended: Vec<FinishedRecord> = self
            .journal
            .with_live(|live| live.unacked_ends().cloned().collect());
        let pending = self
            .ending
            .iter()
            .map(|e| e.finished.job_id)
            .chain(self.checking.iter().map(|c| c.record.job.job_id));
        let pending: Vec<u64> = pending.collect();
        for finished in ended {
            if pending.contains(&finished.job_id) || self.jobs.contains_key(&finished.job_id) {
                continue;
            }
            if let Ok(line) = Reply::Ended(finished).to_line() {
                lines.push_str(&line);
            }
        }
        lines.push_str(&Reply::Done.to_line().unwrap_or_default());
        self.send_all(id, lines.as_bytes());
        self.connections.remove(&id);
    }

    pub(super) fn follow(&mut self, id: u64, job_id: u64) {
        if let Some(connection) = self.connections.get_mut(&id) {
            connection.job = Some(job_id);
        }
    }

    /// A longer answer (a list): written blocking, with a bound, as noded reads it at once.
    pub(super) fn send_all(&mut self, id: u64, bytes: &[u8]) {
        let Some(connection) = self.connections.get_mut(&id) else {
            return;
        };
        let stream = &connection.stream;
        let sent = stream
            .set_nonblocking(false)
            .and_then(|()| stream.set_write_timeout(Some(Duration::from_secs(5))))
            .and_then(|()| (&connection.stream).write_all(bytes));
        if let Err(e) = sent {
            log(&format!("cannot answer noded: {e}"));
        }
    }

    /// The connections following job `job_id`.
    pub(super) fn followers(&self, job_id: u64) -> Vec<u64> {
        self.connections
            .iter()
            .filter(|(_, c)| c.job == Some(job_id))
            .map(|(&id, _)| id)
            .collect()
    }

    /// Sends `reply` on connection `id`.
    pub(super) fn reply(&mut self, id: u64, reply: &Reply) {
        match reply.to_line() {
            Ok(line) => self.send(id, &line),
            Err(e) => log(&format!("cannot encode {reply:?}: {e}")),
        }
    }

    pub(super) fn send(&mut self, id: u64, line: &str) {
        let Some(connection) = self.connections.get_mut(&id) else {
            return;
        };
        // A few bytes into an empty socket buffer: a short write means noded is gone.
        if connection.stream.write_all(line.as_bytes()).is_err() {
            self.connections.remove(&id);
        }
    }
}
