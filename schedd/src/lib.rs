//! schedd, the central scheduler daemon.
//!
//! # Layout
//! - [`core`]: the scheduling decision, a pure function from a snapshot to a plan.
//! - [`state`]: the state machine: every event as a pure function from the records to its
//!   effects (no tokio, sled, wire types or clock).
//! - [`shell`]: the records, agent sessions and outbox behind one lock; runs each event
//!   (store first, then memory and outbox), group commit, the scheduling loop.
//! - [`error`]: `ApiError`, what a request can fail with.
//! - [`fair_share`]: the usage book (decayed GPU usage per account) and the fair-share factors
//!   the core orders each tier by (pure, like `core`).
//! - [`store`]: durable state in sled (the only module that knows sled).
//! - [`server`]: gRPC services (the only module that knows tonic).
//! - [`submit`]: validation of submits.
//! - [`update`]: validation of `yctl update`'s changes.
//! - [`metrics`]: Prometheus metrics (the only module that knows `prometheus-client`).
//! - [`report`]: usage reports (`yctl report`) as a pure function of recorded runs.

#[cfg(test)]
mod agreement_tests;
pub mod core;
pub mod error;
pub mod fair_share;
pub mod metrics;
pub mod replica;
pub mod report;
pub mod server;
pub mod shell;
pub mod state;
pub mod store;
pub mod submit;
#[cfg(test)]
mod submit_tests;
pub mod update;
