//! ysim: replays a workload through schedd's state machine and scheduling core in virtual
//! time, and measures what each policy (a config) does with it.
