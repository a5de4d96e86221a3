//! The ysched command-line tools: `ysub` (submit), `yq` (queue), `ycancel` (cancel) and `yctl`
//! (admin). Each binary in `src/bin` is a thin `main` calling its module here; the parsing and
//! formatting live in plain functions so they can be unit-tested without a running schedd.
//!
//! * [`args`]: parsing a tool's command line, and clap's errors as `<tool>: error: ...`.
//! * [`client`]: connecting to schedd's Unix socket, turning RPC failures into error messages,
//!   and the shared `main` wrapper ([`client::run_tool`]).
//! * [`output`]: aligned text tables and writing to stdout.
//! * [`script`]: `#YSUB` and `#SBATCH` directives and `--export` lists.
//! * [`slurm`]: Slurm's words, formats and states: the table of sbatch's options and their
//!   translation, host lists, job and node states, `%` formats. It uses no other module here.
//! * [`jobs`] / [`nodes`]: the text and JSON renderings of jobs and nodes, shared by the tools.
//! * [`ysched_common::topo_matrix`]: a node's GPU matrix as `nvidia-smi topo -m` prints it.
//! * [`shares`]: `yctl shares`, fair share per account.
//! * [`submit`], [`queue`], [`cancel`], [`admin`]: the four tools; [`report`]: `yctl report`
//!   and `yctl usage import`.
//! * [`compat`]: `yslurm`, Slurm's commands (sbatch, squeue, scancel, sinfo, sacct, srun) for
//!   the tools that call them; no other module uses it.

pub mod admin;
pub mod args;
pub mod cancel;
pub mod client;
pub mod compat;
pub mod jobs;
pub mod nodes;
pub mod output;
pub mod queue;
pub mod report;
pub mod script;
pub mod shares;
pub mod slurm;
pub mod submit;
