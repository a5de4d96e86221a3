//! systemd readiness (`Type=notify`): one datagram to `$NOTIFY_SOCKET`. Without the variable
//! (not started by systemd) this does nothing.

/// Sends `READY=1` to systemd. Errors are returned for logging; they never stop a daemon.
pub fn notify_ready() -> std::io::Result<()> {
    notify("READY=1")
}

pub fn notify(state: &str) -> std::io::Result<()> {
    let Some(path) = std::env::var_os("NOTIFY_SOCKET") else {
        return Ok(());
    };
    let sock = std::os::unix::net::UnixDatagram::unbound()?;
    let bytes = path.as_encoded_bytes();
    if let Some(abstract_name) = bytes.strip_prefix(b"@") {
        use std::os::linux::net::SocketAddrExt;
        let addr = std::os::unix::net::SocketAddr::from_abstract_name(abstract_name)?;
        sock.send_to_addr(state.as_bytes(), &addr)?;
    } else {
        sock.send_to(state.as_bytes(), &path)?;
    }
    Ok(())
}
