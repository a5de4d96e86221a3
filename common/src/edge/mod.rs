//! What both daemons enforce where clients and peers reach them, so that no connection or
//! request of one peer can starve the others:
//!
//! * [`unix_listener`]: the client sockets (schedd's `scheduler.socket`, every agent's
//!   `node.client_socket`) admit at most so many live connections per uid, and in all; a
//!   connection over a limit is closed at accept, before any HTTP/2 state exists for it;
//! * [`peer_log`]: what is logged about refused or unauthenticated peers is rate-limited per
//!   peer, so a flood of bad requests cannot flood the log;
//! * [`cap_message`]: an error message sent back is short, whatever input it echoes, so that
//!   no answer can break HTTP/2's header limits (a gRPC status travels in a header);
//! * [`answers`] and [`answer_body`]: the answers a client has not read yet hold at most so
//!   much memory per connection, per user and in all; past it a request is refused;
//! * [`passed_on`]: a client's request as a relay or a follower passes it on, with none of
//!   the client's metadata.
//!
//! Unlike the rest of `common`, these do I/O (sockets, `tracing`, `setrlimit`).

pub mod answer_body;
pub mod answers;
pub mod passed_on;
pub mod peer_log;
pub mod unix_listener;

/// The longest error message (gRPC status message) a daemon sends, in bytes. A status
/// travels in an HTTP/2 header, percent-encoded (up to three bytes per byte), and every
/// HTTP/2 peer of ysched accepts header lists of 16 KiB: a message of this size always fits.
pub const MAX_STATUS_MESSAGE_BYTES: usize = 1024;

/// `message` cut to at most `max_bytes` bytes, at a character boundary, ending with `…` and
/// the size of the whole when it was cut: `user nobody may not charge account 'zzzz… (60046
/// bytes in all)`.
pub fn cap_message(message: &str, max_bytes: usize) -> std::borrow::Cow<'_, str> {
    if message.len() <= max_bytes {
        return message.into();
    }
    let suffix = format!("… ({} bytes in all)", message.len());
    let mut end = max_bytes.saturating_sub(suffix.len());
    while !message.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}{suffix}", &message[..end]).into()
}

/// Raises this process's soft limit on open files to its hard limit, so that the connection
/// limits are what bounds connections, not `EMFILE` (systemd's default soft limit is 1024).
/// Returns the limit now in force.
pub fn raise_open_files_limit() -> std::io::Result<u64> {
    let mut limit = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit and setrlimit only read and write the struct passed.
    unsafe {
        if libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) != 0 {
            return Err(std::io::Error::last_os_error());
        }
        if limit.rlim_cur < limit.rlim_max {
            let raised = libc::rlimit {
                rlim_cur: limit.rlim_max,
                rlim_max: limit.rlim_max,
            };
            if libc::setrlimit(libc::RLIMIT_NOFILE, &raised) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            limit = raised;
        }
    }
    Ok(limit.rlim_cur)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn short_messages_are_kept_and_long_ones_cut_at_a_character() {
        assert_eq!(
            cap_message("job 5 is not known", 1024),
            "job 5 is not known"
        );
        let long = format!("account '{}'", "z".repeat(60_000));
        let capped = cap_message(&long, 1024);
        assert!(capped.len() <= 1024, "{}", capped.len());
        assert!(capped.starts_with("account 'zzz"), "{capped}");
        assert!(capped.ends_with("zz… (60010 bytes in all)"), "{capped}");
        // Multi-byte characters are never split.
        let wide = "训".repeat(1000);
        for max in 100..140 {
            let capped = cap_message(&wide, max);
            assert!(capped.len() <= max, "{max}: {}", capped.len());
            assert!(capped.contains("… (3000 bytes in all)"), "{capped}");
        }
    }

    #[test]
    fn the_open_files_limit_is_raised_to_the_hard_limit() {
        let now = raise_open_files_limit().unwrap();
        let mut limit = libc::rlimit {
            rlim_cur: 0,
            rlim_max: 0,
        };
        // SAFETY: reads the limit into the struct.
        assert_eq!(
            unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) },
            0
        );
        assert_eq!(limit.rlim_cur, limit.rlim_max);
        assert_eq!(now, limit.rlim_cur);
    }
}
