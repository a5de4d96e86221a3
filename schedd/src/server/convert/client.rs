//! Wire answers to clients other than listings: nodes, a job's detail, fair shares, usage
//! reports and trace exports.

use ysched_proto as pb;

/// `yctl nodes`' wire form of a node.
pub(crate) fn node_info(v: &crate::state::views::NodeView) -> pb::NodeInfo {
    let n = &v.node;
    pb::NodeInfo {
        name: n.name.clone(),
        state: v.state.into(),
        address: n.address.clone(),
        cpus: n.cpus,
        mem_mib: n.mem_mib,
        gpus: n.gpus.iter().map(Into::into).collect(),
        gpu_holders: v.gpu_holders.clone(),
        reason: v.reason.clone(),
        cpus_alloc: v.cpus_alloc,
        mem_alloc_mib: v.mem_alloc_mib,
        features: n.features.clone(),
        last_seen_ms: n.last_seen,
        fence_after_secs: n.fence_after_secs,
        gpus_out_of_service: n
            .gpus_out_of_service
            .iter()
            .map(|(index, outage)| pb::GpuOutage {
                index: *index,
                reason: outage.reason.clone(),
                since_ms: outage.since,
                by: outage.by.clone(),
            })
            .collect(),
    }
}

/// `yctl show job`'s wire form: the reason carries the per-node explanation of a pending job.
pub(crate) fn job_detail(d: &crate::shell::JobDetail) -> pb::JobDetail {
    let mut info = pb::JobInfo::from(&d.job);
    if !d.waits.is_empty() {
        let lines: Vec<String> = d.waits.iter().map(|(n, w)| format!("{n}: {w}")).collect();
        info.reason = format!("{} [{}]", info.reason, lines.join("; "));
    }
    pb::JobDetail {
        job: Some(info),
        events: d.events.iter().map(Into::into).collect(),
    }
}

/// Fair share per account (`yctl shares`).
pub(crate) fn share_list(t: &crate::fair_share::ShareTable) -> pb::ShareList {
    pb::ShareList {
        accounts: t
            .accounts
            .iter()
            .map(|a| pb::AccountShare {
                account: a.account.clone(),
                parent: a.parent.clone(),
                shares: a.shares,
                norm_shares: a.norm_shares,
                raw_gpu_secs: a.raw_gpu_secs,
                decayed_gpu_secs: a.decayed_gpu_secs,
                effective_usage: a.effective_usage,
                fair_share: a.factor,
            })
            .collect(),
        half_life_secs: u64::try_from(t.half_life_ms / 1000).unwrap_or(0),
        as_of_ms: t.as_of,
    }
}

fn tier_waits(waits: &[crate::report::Waits]) -> Vec<pb::TierWait> {
    waits
        .iter()
        .map(|w| pb::TierWait {
            tier: w.tier.clone(),
            starts: w.starts,
            wait_p50_ms: w.p50_ms,
            wait_p95_ms: w.p95_ms,
            wait_max_ms: w.max_ms,
        })
        .collect()
}

/// A usage report (`yctl report`) on the wire.
pub(crate) fn report_reply(r: &crate::report::Report) -> pb::ReportReply {
    let c = &r.cluster;
    pb::ReportReply {
        from_ms: r.from,
        to_ms: r.to,
        by: r.by.as_str().to_string(),
        generated_ms: r.generated,
        all_accounts: r.all_accounts,
        cluster: Some(pb::ReportCluster {
            gpus: c.gpus,
            capacity_gpu_ms: c.capacity_gpu_ms,
            used_gpu_ms: c.used_gpu_ms,
            jobs: c.jobs,
            runs: c.runs,
            running: c.running,
            preemptions: c.preemptions,
            checkpoints_saved: c.checkpoints_saved,
            lost_gpu_ms: c.lost_gpu_ms,
            restarts: c.restarts,
            start_latency: tier_waits(&c.start_latency),
        }),
        groups: r
            .groups
            .iter()
            .map(|g| pb::ReportGroup {
                name: g.name.clone(),
                gpu_ms: g.gpu_ms,
                cpu_ms: g.cpu_ms,
                jobs: g.jobs,
                runs: g.runs,
                running: g.running,
                restarts: g.restarts,
                preemptions_suffered: g.preemptions_suffered,
                preemptions_caused: g.preemptions_caused,
                checkpoints_saved: g.checkpoints_saved,
                lost_gpu_ms: g.lost_gpu_ms,
                waits: tier_waits(&g.waits),
                outcomes: g
                    .outcomes
                    .iter()
                    .map(|(outcome, runs)| pb::OutcomeCount {
                        outcome: outcome.clone(),
                        runs: *runs,
                    })
                    .collect(),
            })
            .collect(),
        days: r
            .days
            .iter()
            .map(|d| pb::ReportDay {
                start_ms: d.start_ms,
                capacity_gpu_ms: d.capacity_gpu_ms,
                used_gpu_ms: d.used_gpu_ms,
                groups: d
                    .groups
                    .iter()
                    .map(|(name, gpu_ms)| pb::GroupUsage {
                        name: name.clone(),
                        gpu_ms: *gpu_ms,
                    })
                    .collect(),
            })
            .collect(),
    }
}

/// A trace export (`yctl report --export-trace`) on the wire.
pub(crate) fn trace_reply(e: &crate::shell::TraceExport) -> pb::TraceReply {
    pb::TraceReply {
        from_ms: e.from,
        to_ms: e.to,
        generated_ms: e.generated,
        all_accounts: e.all_accounts,
        unfinished: e.trace.unfinished,
        jobs: e
            .trace
            .rows
            .iter()
            .map(|r| {
                let spec = r.spec.as_ref();
                pb::TraceJob {
                    job_id: r.display_id.clone(),
                    submit_ms: r.submit_ms,
                    tier: r.tier.clone(),
                    account: r.account.clone(),
                    user: r.user.clone(),
                    gpus: r.gpus,
                    duration_ms: r.duration_ms,
                    outcome: r.outcome.clone(),
                    restarts: r.restarts,
                    spec_known: spec.is_some(),
                    gpu_types: spec.map(|s| s.gpu_types.clone()).unwrap_or_default(),
                    nodes: spec.map(|s| s.nodes),
                    cpus: spec.map_or(r.run_cpus, |s| s.cpus),
                    mem_mib: spec.map_or(0, |s| s.mem_mib),
                    time_limit_secs: spec.and_then(|s| s.time_limit_secs),
                    grace_secs: spec.and_then(|s| s.grace_secs),
                }
            })
            .collect(),
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_private_gpu_holder_passes_to_the_wire_as_the_wires_own_value() {
        // `gpu_holders` are copied as they are: the domain's marker must be the wire's.
        assert_eq!(
            crate::state::views::PRIVATE_HOLDER,
            ysched_proto::PRIVATE_HOLDER
        );
    }
}
