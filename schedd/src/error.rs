//! What a request can fail with. The kind decides the gRPC status code (in `server`); the
//! message is shown to the user as it is.

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ApiError {
    /// Bad input: the message names the value and the rule it broke.
    #[error("{0}")]
    Invalid(String),
    #[error("{0}")]
    NotFound(String),
    #[error("{0}")]
    Denied(String),
    /// The request does not fit the object's state (cancel a finished job, ...).
    #[error("{0}")]
    Conflict(String),
    #[error("{0}")]
    AlreadyExists(String),
    /// The state store refused a write (disk full, read-only, I/O error): nothing changed.
    #[error("{0}")]
    Unavailable(String),
    #[error("{0}")]
    Internal(String),
}

pub type ApiResult<T> = Result<T, ApiError>;
