//! Counting which of a set of held-open connections the peer has closed.

/// Of `streams`, how many the peer has closed (end of file or reset) by now; the others are
/// open (what the peer sent them is read and dropped).
pub fn count_closed<S: std::io::Read + NonBlocking>(streams: &mut [S]) -> usize {
    let mut closed = 0;
    for s in streams.iter_mut() {
        s.make_nonblocking();
        let mut buf = [0u8; 4096];
        loop {
            match s.read(&mut buf) {
                Ok(0) => {
                    closed += 1;
                    break;
                }
                Ok(_) => continue,
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => break,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                Err(_) => {
                    closed += 1;
                    break;
                }
            }
        }
    }
    closed
}

/// Streams [`count_closed`] can look at without blocking.
pub trait NonBlocking {
    fn make_nonblocking(&self);
}

impl NonBlocking for std::os::unix::net::UnixStream {
    fn make_nonblocking(&self) {
        self.set_nonblocking(true).unwrap();
    }
}

impl NonBlocking for std::net::TcpStream {
    fn make_nonblocking(&self) {
        self.set_nonblocking(true).unwrap();
    }
}
