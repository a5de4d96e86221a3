//! schedd, the central scheduler daemon.
//!
//! # Layout
//! - [`core`]: the scheduling decision, a pure function from a snapshot to a plan.
//! - [`cluster`]: in-memory state, event handlers, and the applier of plans.
//! - [`state`]: the state machine taking shape: pure decisions on domain records
//!   (`lifecycle`: how a run ends).
//! - [`error`]: `ApiError`, what a request can fail with.
//! - [`store`]: durable state in sled (the only module that knows sled).
//! - [`server`]: gRPC services (the only module that knows tonic).
//! - [`submit`]: validation of submits.

pub mod cluster;
pub mod core;
pub mod error;
pub mod server;
pub mod state;
pub mod store;
pub mod submit;
