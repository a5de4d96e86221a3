//! Talking to schedd: every tool connects to a Unix socket, schedd's own on the scheduler host
//! or the local node agent's elsewhere (see [`socket_path`]). The server identifies the caller
//! from the socket's peer credentials (an agent relays them, vouched for by its host), so
//! nothing here names a user.

use anyhow::{anyhow, Result};
use std::future::Future;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Duration;
use tonic::transport::{Channel, Endpoint, Uri};
use ysched_common::config::CONF_ENV;
use ysched_common::Config;
use ysched_proto::ysched_client::YschedClient;

// The command-line helpers every tool's `main` used to find here.
use crate::args::escape_lines;
pub use crate::args::{
    check_utf8_args, clap_error_message, clap_error_text, parse_args, parse_args_from, show_os_str,
    OptionError,
};

/// A connection to schedd: its gRPC client (what the tools call, through `Deref`), and the
/// channel under it for the calls made by hand ([`list_jobs_page`]).
#[derive(Clone, Debug)]
pub struct Client {
    rpc: YschedClient<Channel>,
    channel: Channel,
}

impl Client {
    /// The gRPC client alone.
    pub fn rpc(self) -> YschedClient<Channel> {
        self.rpc
    }
}

impl std::ops::Deref for Client {
    type Target = YschedClient<Channel>;
    fn deref(&self) -> &Self::Target {
        &self.rpc
    }
}

impl std::ops::DerefMut for Client {
    fn deref_mut(&mut self) -> &mut Self::Target {
        &mut self.rpc
    }
}

/// How long to wait for the socket connection itself; a local socket answers at once unless
/// schedd is wedged.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

/// Names the client socket to use, overriding the config (noded sets it in every job's
/// environment, so that a job reaches schedd through its own node).
pub const SOCKET_ENV: &str = "YSCHED_SOCKET";

/// The socket the tools talk to: `YSCHED_SOCKET` if set; else schedd's own socket
/// (`scheduler.socket`) where it exists (the scheduler host); else the local agent's
/// (`node.client_socket`) where that exists (a login or compute node); else
/// `scheduler.socket`, so that the error names it. One config file serves every host.
pub fn socket_path(config: &Config) -> PathBuf {
    if let Some(path) = std::env::var_os(SOCKET_ENV).filter(|p| !p.is_empty()) {
        return PathBuf::from(path);
    }
    let scheduler = &config.scheduler.socket;
    let agent = &config.node.client_socket;
    if !scheduler.exists() && !agent.as_os_str().is_empty() && agent.exists() {
        return agent.clone();
    }
    scheduler.clone()
}

/// Loads the config (`YSCHED_CONF`) and connects to its socket (see [`socket_path`]).
pub async fn connect_from_config() -> Result<(Client, PathBuf)> {
    connect_with_config(&Config::load()?).await
}

/// Connects to `config`'s socket (see [`socket_path`]). When that is the local agent's only
/// because schedd's own socket is not there (schedd not running on this host, or
/// restarting), a failure says both.
pub async fn connect_with_config(config: &Config) -> Result<(Client, PathBuf)> {
    let socket = socket_path(config);
    let scheduler = &config.scheduler.socket;
    match connect(&socket).await {
        Ok(client) => Ok((client, socket)),
        Err(e) if socket != *scheduler && std::env::var_os(SOCKET_ENV).is_none() => Err(anyhow!(
            "{e}; it is this host's noded's socket (node.client_socket), used because schedd's \
             own socket {} (scheduler.socket) is not there: on a scheduler host, schedd is not \
             running or is restarting",
            scheduler.display()
        )),
        Err(e) => Err(e),
    }
}

/// Connects to schedd on the Unix socket at `socket`.
pub async fn connect(socket: &Path) -> Result<Client> {
    let dial_path = socket.to_path_buf();
    // The URI only satisfies the HTTP/2 layer: the connector below ignores it and dials the socket.
    let channel = Endpoint::from_static("http://[::]:50051")
        .connect_timeout(CONNECT_TIMEOUT)
        // Large windows: a 10,000-job listing arrives without flow-control round trips.
        .initial_stream_window_size(Some(16 * 1024 * 1024))
        .initial_connection_window_size(Some(16 * 1024 * 1024))
        .connect_with_connector(tower::service_fn(move |_: Uri| {
            let path = dial_path.clone();
            async move {
                let stream = tokio::net::UnixStream::connect(path).await?;
                Ok::<_, std::io::Error>(hyper_util::rt::TokioIo::new(stream))
            }
        }))
        .await
        .map_err(|e| {
            if closed_at_once(&e) {
                anyhow!(
                    "schedd at {} closed the connection at once ({}): {CLOSED_HINT}",
                    socket.display(),
                    root_cause(&e)
                )
            } else {
                anyhow!(
                    "cannot reach schedd at {}: {} (is schedd, or this host's noded, running? \
                     check {CONF_ENV} and {SOCKET_ENV})",
                    socket.display(),
                    root_cause(&e)
                )
            }
        })?;
    // A listing of many jobs easily exceeds tonic's 4 MiB default; the server is trusted.
    Ok(Client {
        rpc: YschedClient::new(channel.clone()).max_decoding_message_size(usize::MAX),
        channel,
    })
}

/// Why schedd (or the node's agent) may have closed a connection before answering: its limit
/// of connections per user, or in all, refused it (closed at accept), or it went away.
const CLOSED_HINT: &str = "you may hold too many connections to it (scheduler.\
    max_connections_per_user each, max_client_connections in all; node.* on a node; its log \
    names the limit: close some and retry), or it is restarting";

/// Whether the server closed the connection before answering (reset, broken pipe, end of
/// file), rather than refusing it or not being there: a connection over a limit is closed at
/// accept.
fn closed_at_once(error: &(dyn std::error::Error + 'static)) -> bool {
    let mut cause = Some(error);
    while let Some(e) = cause {
        if let Some(io) = e.downcast_ref::<std::io::Error>() {
            if matches!(
                io.kind(),
                std::io::ErrorKind::BrokenPipe
                    | std::io::ErrorKind::ConnectionReset
                    | std::io::ErrorKind::UnexpectedEof
            ) {
                return true;
            }
        }
        let text = e.to_string().to_ascii_lowercase();
        // hyper's words for it (its errors do not always carry the io::Error).
        if text.contains("connection closed")
            || text.contains("broken pipe")
            || text.contains("connection reset")
        {
            return true;
        }
        cause = e.source();
    }
    false
}

/// The innermost error of a chain: for a failed connect that is the OS error
/// ("No such file or directory", "Permission denied"), which is what the user can act on.
fn root_cause(error: &(dyn std::error::Error + 'static)) -> String {
    let mut innermost = error;
    while let Some(source) = innermost.source() {
        innermost = source;
    }
    innermost.to_string()
}

/// Turns a gRPC error status into the error the tools print: the server's message as is,
/// except that a message over gRPC's size limit is said to be one, see [`request_error`].
pub fn status_error(status: tonic::Status) -> anyhow::Error {
    request_error("", status)
}

/// [`status_error`] for a named request (`submit`, `list jobs`, ...). tonic's own words for a
/// message over the size limit, `decoded message length too large: found 50001719 bytes, the
/// limit is: 4194304 bytes`, become `a message size limit was exceeded: the submit request is
/// 47.7 MiB, over schedd's limit of 4.0 MiB`.
pub fn request_error(request: &str, status: tonic::Status) -> anyhow::Error {
    let message = status.message();
    if let Some(text) = message_too_large(request, &status) {
        return anyhow!(text);
    }
    if matches!(
        status.code(),
        tonic::Code::Unavailable
            | tonic::Code::Unknown
            | tonic::Code::Internal
            | tonic::Code::Cancelled
    ) && closed_at_once(&status)
    {
        return anyhow!("schedd closed the connection ({message}): {CLOSED_HINT}");
    }
    if message.is_empty() {
        anyhow!("{}", status.code().description())
    } else {
        anyhow!("{message}")
    }
}

/// The message for a status that says a gRPC message exceeded a size limit, if it says so.
fn message_too_large(request: &str, status: &tonic::Status) -> Option<String> {
    let message = status.message();
    let lower = message.to_ascii_lowercase();
    let too_large = lower.contains("message length too large")
        || (status.code() == tonic::Code::OutOfRange && lower.contains("too large"));
    if !too_large {
        return None;
    }
    let what = if request.is_empty() {
        "the request".to_string()
    } else {
        format!("the {request} request")
    };
    // "... found N bytes, the limit is: M bytes"
    let number_after = |key: &str| -> Option<u64> {
        let rest = &lower[lower.find(key)? + key.len()..];
        let digits: String = rest
            .trim_start()
            .chars()
            .take_while(char::is_ascii_digit)
            .collect();
        digits.parse().ok()
    };
    let size = ysched_common::parse::format_size;
    Some(match (number_after("found"), number_after("limit is:")) {
        (Some(found), Some(limit)) => format!(
            "a message size limit was exceeded: {what} is {}, over schedd's limit of {}",
            size(found),
            size(limit)
        ),
        _ => format!("a message size limit was exceeded: {what} is too large ({message})"),
    })
}

/// Unwraps an RPC reply, converting an error status with [`status_error`].
pub fn reply<T>(result: Result<tonic::Response<T>, tonic::Status>) -> Result<T> {
    result
        .map(tonic::Response::into_inner)
        .map_err(status_error)
}

/// [`reply`] for a named request, converting an error status with [`request_error`].
pub fn reply_to<T>(request: &str, result: Result<tonic::Response<T>, tonic::Status>) -> Result<T> {
    result
        .map(tonic::Response::into_inner)
        .map_err(|status| request_error(request, status))
}

/// Every job a listing selects, page by page (`ListJobsRequest.after_id`,
/// `JobList.next_after_id`: schedd sends at most `limits::JOBS_PER_REPLY` jobs a reply):
/// `each` gets each page's jobs, in id order, as it comes. A page that says to go on where
/// the previous one stopped, or not past it, is an error rather than a loop.
pub async fn for_each_page(
    client: &mut Client,
    mut request: ysched_proto::ListJobsRequest,
    mut each: impl FnMut(Vec<ysched_proto::JobInfo>) -> Result<()>,
) -> Result<()> {
    loop {
        let page = reply(list_jobs_page(client, request.clone()).await)?;
        let next = page.next_after_id;
        each(page.jobs)?;
        if next == 0 {
            return Ok(());
        }
        if next <= request.after_id {
            return Err(anyhow!(
                "schedd's listing went back to job {next} after job {}",
                request.after_id
            ));
        }
        request.after_id = next;
    }
}

/// One page of a listing, its jobs decoded into a vector made to their number (see
/// [`ysched_proto::listing`]).
async fn list_jobs_page(
    client: &Client,
    request: ysched_proto::ListJobsRequest,
) -> Result<tonic::Response<ysched_proto::JobList>, tonic::Status> {
    let reply = ysched_proto::listing::list_jobs(client.channel.clone(), request).await?;
    Ok(reply.map(|page| ysched_proto::JobList {
        jobs: page.jobs,
        next_after_id: page.next_after_id,
    }))
}

/// Every job a listing selects, all its pages together (see [`for_each_page`]).
pub async fn list_all_jobs(
    client: &mut Client,
    request: ysched_proto::ListJobsRequest,
) -> Result<Vec<ysched_proto::JobInfo>> {
    let mut jobs = Vec::new();
    for_each_page(client, request, |page| {
        if jobs.is_empty() {
            jobs = page;
        } else {
            jobs.extend(page);
        }
        Ok(())
    })
    .await?;
    Ok(jobs)
}

/// Runs a tool's body on a current-thread runtime (cheap to start: `ysub` is run hundreds of
/// times a second by scripts) and turns an error into `<tool>: error: <message>` and exit 1.
pub fn run_tool<F, Fut>(tool: &str, body: F) -> ExitCode
where
    F: FnOnce() -> Fut,
    Fut: Future<Output = Result<ExitCode>>,
{
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(e) => {
            eprintln!("{tool}: error: cannot start the async runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    match runtime.block_on(body()) {
        Ok(code) => code,
        Err(e) => {
            // Messages echo what users and other users typed: keep escapes off the terminal.
            eprintln!("{tool}: error: {}", escape_lines(&format!("{e:#}")));
            ExitCode::FAILURE
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn status_messages_are_printed_as_is() {
        let e = status_error(tonic::Status::permission_denied("job 5 is not yours"));
        assert_eq!(e.to_string(), "job 5 is not yours");
        let e = status_error(tonic::Status::new(tonic::Code::NotFound, ""));
        assert!(!e.to_string().is_empty());
    }

    #[test]
    fn oversized_messages_say_a_limit_was_exceeded_and_which_request() {
        let status = || {
            tonic::Status::out_of_range(
                "Error, decoded message length too large: found 50001719 bytes, the limit is: \
                 4194304 bytes",
            )
        };
        assert_eq!(
            request_error("submit", status()).to_string(),
            "a message size limit was exceeded: the submit request is 47.7 MiB, over schedd's \
             limit of 4.0 MiB"
        );
        assert!(status_error(status())
            .to_string()
            .starts_with("a message size limit was exceeded: the request is 47.7 MiB"));
        // Whatever the code, tonic's words are recognised; without numbers the text is kept.
        let e = request_error(
            "list jobs",
            tonic::Status::internal("message length too large"),
        );
        assert_eq!(
            e.to_string(),
            "a message size limit was exceeded: the list jobs request is too large (message \
             length too large)"
        );
        // Other OutOfRange errors are the server's own words.
        let e = request_error("submit", tonic::Status::out_of_range("job id out of range"));
        assert_eq!(e.to_string(), "job id out of range");
    }

    #[test]
    fn unreachable_socket_names_path_and_cause() {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        let path = std::env::temp_dir().join(format!("ysub-no-such-{}.sock", std::process::id()));
        let err = runtime.block_on(connect(&path)).unwrap_err().to_string();
        assert!(
            err.starts_with(&format!("cannot reach schedd at {}: ", path.display())),
            "{err}"
        );
        assert!(err.contains("No such file or directory"), "{err}");
        assert!(err.contains("YSCHED_CONF"), "{err}");
    }
}
