//! Wire messages made from and into the state machine's domain types: the one place that
//! knows both. `agent`: what agents report and what they are told; `listing`: `ListJobs`' request
//! and answer; `client`: the other answers to clients.

pub(crate) mod agent;
pub(crate) mod client;
pub(crate) mod listing;
