//! schedd's state machine, growing out of `cluster.rs`: decisions on domain records with no
//! tokio, no sled, no wire types and no clock (`now` is an argument).
//!
//! - `commands`: what schedd tells an agent (launch, stop, ack), as domain data.
//! - `lifecycle`: how a job's run ends (an agent's report of a part's end, or a part its agent
//!   no longer knows).

pub mod commands;
pub mod lifecycle;

#[cfg(test)]
mod lifecycle_tests;
