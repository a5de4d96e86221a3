#!/usr/bin/env python3
"""Summarizes latency stamps (YSCHED_LATENCY_STAMPS, see common/src/stamp.rs) of a run of
`bench hq`: the median and 90th percentile of each step of a job's cycle, for the array's jobs
(ids from FIRST, 21 by default: the 20 idle jobs come first), and schedd's part of the cycle.

    YSCHED_LATENCY_STAMPS=/tmp/stamps HQ_ROUNDS=1 target/release/bench hq
    scripts/latency-stamps.py /tmp/stamps [FIRST]

A measurement aid (docs/benchmarks.md); not used by the tests.
"""
import sys, collections, statistics as st
rows=[l.split() for l in open(sys.argv[1])]
lo=int(sys.argv[2]) if len(sys.argv)>2 else 21
ev=collections.defaultdict(dict); glob=collections.defaultdict(list)
for t,pid,label,j in rows:
    t=int(t); j=int(j)
    if label in ('d.pass','d.pass_done','d.reports_applied','n.spawned_supervisor','s.up'):
        glob[label].append((t,j)); continue
    ev[j].setdefault(label,t)
chain=['d.launch_out','n.launch_in','n.planned','n.connected','n.handed','s.launch_req','s.launch_synced','s.forked','s.exec_done','s.reaped','s.all_gone','s.cgroup_removed','s.end_appended','s.end_synced','s.end_told','n.finished_out','d.finished_in']
jobs=[j for j in ev if j>=lo]
print("jobs",len(jobs))
for a,b in zip(chain,chain[1:]):
    d=[(ev[j][b]-ev[j][a])/1000 for j in jobs if a in ev[j] and b in ev[j]]
    if d: print(f"{a:18s}->{b:18s} med {st.median(d):7.2f} p90 {sorted(d)[int(len(d)*.9)]:7.2f} ms")
for extra in [('s.exec_done','s.started_told'),('s.started_told','n.started_line'),('s.end_told','n.ended_line'),('n.ended_line','n.finished_out')]:
    a,b=extra; d=[(ev[j][b]-ev[j][a])/1000 for j in jobs if a in ev[j] and b in ev[j]]
    if d: print(f"  {a:18s}->{b:18s} med {st.median(d):7.2f}")
jobs=[j for j in jobs if 'd.finished_in' in ev[j] and 'd.launch_out' in ev[j]]
tot=[(ev[j]['d.finished_in']-ev[j]['d.launch_out'])/1000 for j in jobs]
print("launch_out->finished_in med %.2f" % st.median(tot))
fin=sorted(ev[j]['d.finished_in'] for j in jobs); lau=sorted(ev[j]['d.launch_out'] for j in jobs)
gaps=[(lau[k+16]-fin[k])/1000 for k in range(len(fin)-16)]
print("schedd gap finished_in(k)->launch_out(k+16) med %.2f p90 %.2f"%(st.median(gaps),sorted(gaps)[int(len(gaps)*.9)]))
p=glob['d.pass']; pd=glob['d.pass_done']
dur=[(b[0]-a[0])/1000 for a,b in zip(p,pd)]
arr=[x for x in p if x[0]>=min(lau)]
print("passes during array", len(arr), "pass dur med %.2f"%st.median(dur))
ra=glob['d.reports_applied']; print("report batches",len(ra),"mean size",st.mean(j for t,j in ra))
span=(max(fin)-min(lau))/1e6; print("array span s %.2f -> %.0f/s"%(span,len(jobs)/span))
