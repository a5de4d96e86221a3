//! `noded`, the per-host node agent of ysched.
//!
//! It reports what the host has ([`gpu`], [`host`], gathered in [`inventory`]), watches its
//! GPUs' health on a thread of its own ([`gpu_watch`]), keeps one session with schedd
//! ([`agent`], which converts the launcher's requests and events to and from the wire in
//! [`convert`]), and runs jobs as real processes under the node's supervisor (one process
//! per node, which journals every launch and end) so that they survive a restart of noded
//! itself ([`launch`]); the supervisor stops them on its own when the node has lost schedd
//! for `node.fence_after_secs` ([`launch::lease`]).
//! It proves itself to schedd with its own certificate ([`credential`], got by enrolling
//! with a one-time token) or, on clusters that predate enrolment, the shared cluster key.
//! It serves the host's client socket and relays its requests to schedd over the agent's
//! session ([`relay`]). `noded --inventory` prints what it would report, with the GPU matrix
//! of [`ysched_common::topo_matrix`].
//!
//! The binary (`src/main.rs`) only parses flags and wires these modules together.

pub mod agent;
pub mod convert;
pub mod credential;
pub mod daemon;
pub mod gpu;
pub mod gpu_watch;
pub mod host;
pub mod inventory;
pub mod launch;
pub mod relay;

/// The agent's version, reported to schedd at registration.
pub const VERSION: &str = env!("CARGO_PKG_VERSION");
