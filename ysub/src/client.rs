//! Talking to schedd: every tool connects to the Unix socket named in the config. The server
//! identifies the caller from the socket's peer credentials, so nothing here names a user.

use anyhow::{anyhow, Result};
use std::future::Future;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Duration;
use tonic::transport::{Channel, Endpoint, Uri};
use ysched_common::config::CONF_ENV;
use ysched_common::Config;
use ysched_proto::ysched_client::YschedClient;

pub type Client = YschedClient<Channel>;

/// How long to wait for the socket connection itself; a local socket answers at once unless
/// schedd is wedged.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

/// Loads the config (`YSCHED_CONF`) and connects to its `scheduler.socket`.
pub async fn connect_from_config() -> Result<(Client, PathBuf)> {
    let config = Config::load()?;
    let socket = config.scheduler.socket;
    let client = connect(&socket).await?;
    Ok((client, socket))
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
            anyhow!(
                "cannot reach schedd at {}: {} (is schedd running? check {CONF_ENV})",
                socket.display(),
                root_cause(&e)
            )
        })?;
    // A listing of many jobs easily exceeds tonic's 4 MiB default; the server is trusted.
    Ok(YschedClient::new(channel).max_decoding_message_size(usize::MAX))
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

/// Turns a gRPC error status into the error the tools print: the server's message as is.
pub fn status_error(status: tonic::Status) -> anyhow::Error {
    if status.message().is_empty() {
        anyhow!("{}", status.code().description())
    } else {
        anyhow!("{}", status.message())
    }
}

/// Unwraps an RPC reply, converting an error status with [`status_error`].
pub fn reply<T>(result: Result<tonic::Response<T>, tonic::Status>) -> Result<T> {
    result
        .map(tonic::Response::into_inner)
        .map_err(status_error)
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
            eprintln!("{tool}: error: {e:#}");
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
