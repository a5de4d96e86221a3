//! Job and node records as schedd keeps them. The scheduling core reads these; the store
//! persists them (as JSON); the server converts them to the wire format.
//!
//! - [`job`]: a job (its id, state, spec and stop request) and its history.
//! - [`run`]: a run of a job: what it holds per node, how far its parts got, and the usage
//!   record written when it ends.
//! - [`node`]: a node and its GPUs, their topology and outages.
//! - [`host`]: a host's enrolment (the certificate schedd takes from it).
//! - [`caller`]: who acts (a job's owner, a request's caller) and the audit log of what they did.

mod caller;
mod host;
mod job;
mod node;
mod run;

pub use caller::{AuditRecord, Caller, Owner};
pub use host::HostEnrolment;
pub use job::{HeldBy, Job, JobEvent, JobId, JobSpec, JobState, StopReason, StopRequest};
pub use node::{gpu_type_matches, Gpu, GpuLink, GpuOutage, Node, PcieRelation, GPU_HEALTH_BY};
pub use run::{NodeAlloc, PartFailure, Parts, PartsProgress, RunRecord, RunView};

#[cfg(test)]
mod tests;
