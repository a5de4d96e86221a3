//! The store's errors: what sled, a corrupt record or a full disk did to a read or a write.

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("state store: {0}")]
    Sled(#[from] sled::Error),
    #[error("state store: corrupt record {key}: {source}")]
    Corrupt {
        key: String,
        source: serde_json::Error,
    },
    #[error("state store: job {id} is a task of array {array_id}, whose spec is missing")]
    MissingArraySpec { id: u64, array_id: u64 },
    #[error("state store: corrupt usage record {key}: {why}")]
    CorruptRun { key: String, why: String },
    // Not a `source`: the message says it already (a source would be printed twice).
    #[error("state store: cannot open {path}: {why}")]
    Open { path: String, why: sled::Error },
    /// Another process holds the store's lock past [`super::LOCK_WAIT`].
    #[error(
        "state store {path} is in use by another process, still after {secs} s: is another \
         schedd running with this scheduler.state_dir? (`fuser -v {path}/db/db` names it)"
    )]
    Locked { path: String, secs: u64 },
    /// The state disk has too little free space for the change (see [`Store::check_room`]).
    #[error("state store full: {0}; nothing was changed: free some space and retry")]
    Full(String),
    #[error("state store unwritable: cannot check free space in {dir}: {source}")]
    Statvfs { dir: String, source: nix::Error },
    #[error("state store unwritable: writes are refused (a test's failure injection)")]
    Injected,
    /// A sync that makes flushed writes survive a power loss failed (see `stable`): what it
    /// covered may be lost, so nothing it covered may be acknowledged.
    #[error("state store: cannot make the flushed writes durable: {0}")]
    Sync(std::io::Error),
    /// A replica's snapshot of the state that cannot be read (see `raft`): nothing was
    /// changed.
    #[error("state store: bad snapshot: {0}")]
    Snapshot(String),
    /// A key in the replica's log that is not an entry's index.
    #[error("state store: corrupt replica log: {0}")]
    CorruptLog(String),
}

impl Error {
    /// sled itself failed a write: it cannot go on (a later write or flush may never return,
    /// as after ENOSPC in the middle of a write), and only a restart from what is on disk
    /// is safe.
    pub fn is_fatal_write(&self) -> bool {
        matches!(self, Error::Sled(_) | Error::Sync(_))
    }

    /// The store could not take a write (disk full, I/O error): the request was refused and
    /// nothing changed, as opposed to a bad record.
    pub fn is_unavailable(&self) -> bool {
        matches!(
            self,
            Error::Full(_)
                | Error::Statvfs { .. }
                | Error::Injected
                | Error::Sled(sled::Error::Io(_))
        )
    }
}

pub type Result<T> = std::result::Result<T, Error>;

/// A store's failure as a request sees it: unavailable (a full or unwritable disk: nothing
/// changed, retry later) or internal.
impl From<Error> for crate::error::ApiError {
    fn from(e: Error) -> Self {
        if e.is_unavailable() {
            crate::error::ApiError::Unavailable(e.to_string())
        } else {
            crate::error::ApiError::Internal(e.to_string())
        }
    }
}
