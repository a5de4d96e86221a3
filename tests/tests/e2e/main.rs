//! The end-to-end tests, one module per area, in one test binary (one link instead of one per
//! file). Run one area with `cargo test -p ysched-tests --test e2e arrays::`.

mod arrays;
mod bounds;
mod checkpoint_eviction;
mod compat;
mod containment;
mod fair_share;
mod file_modes;
mod foundation;
mod full_disk;
mod gpu_check_script;
mod gpu_health;
mod hardening;
mod hardening_cli;
mod hardening_conns;
mod hardening_files;
mod hardening_hosts;
mod hardening_node;
mod history;
mod mail_abuse;
mod metrics;
mod multihost;
mod nvml;
mod placement;
mod policy;
mod power_loss;
mod preemption;
mod replicas;
mod report;
mod slurm_options;
mod slurm_scripts;
mod unread_answers;
mod update_and_filters;
mod ysim_agreement;
