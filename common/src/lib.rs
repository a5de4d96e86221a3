//! Domain types every ysched crate shares: ids, job and node records, tiers and config,
//! parsers for the Slurm-style option formats, and conversions to and from the wire format.
//!
//! Nothing here does I/O except [`config::Config::load`], which reads the config file,
//! [`identity`], which asks the name service who a uid is, [`secret`], which reads the
//! cluster's secret files, and [`edge`], what both daemons enforce at their sockets
//! (connection limits, rate-limited peer logs).

pub mod array;
pub mod config;
pub mod convert;
pub mod dependency;
pub mod durable;
pub mod edge;
pub mod gpu_json;
pub mod identity;
pub mod limits;
pub mod mail_address;
pub mod mail_types;
pub mod output_pattern;
pub mod parse;
pub mod sdnotify;
pub mod secret;
pub mod signals;
pub mod stamp;
pub mod submit_request;
pub mod text;
pub mod time;
pub mod tls;
pub mod topo_matrix;
pub mod types;

pub use array::{ArraySpec, ArrayTask, JobTarget};
pub use config::{Config, TierConfig};
pub use dependency::{DepClause, DepKind, DepStatus, Dependency, DependencyRequest, TargetState};
pub use signals::WarnSignal;
pub use submit_request::SubmitRequest;
pub use types::*;
