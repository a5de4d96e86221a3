//! Tests of containment: detecting the host's cgroups, and the job cgroups made on them.

use super::host::detected_root;
use super::*;

/// `/proc/self/mountinfo` of a hybrid host (v1 controllers, controller-less v2 at `unified`).
const HYBRID_MOUNTS: &str = "\
24 30 0:22 / /sys rw,nosuid,nodev,noexec,relatime shared:7 - sysfs sysfs rw
31 24 0:26 / /sys/fs/cgroup ro,nosuid,nodev,noexec shared:9 - tmpfs tmpfs ro,mode=755
32 31 0:27 / /sys/fs/cgroup/unified rw,nosuid,nodev,noexec,relatime shared:10 - cgroup2 cgroup2 rw,nsdelegate
35 31 0:30 / /sys/fs/cgroup/memory rw,nosuid,nodev,noexec,relatime shared:14 - cgroup cgroup rw,memory
36 31 0:31 / /sys/fs/cgroup/cpu,cpuacct rw,nosuid,nodev,noexec,relatime shared:15 - cgroup cgroup rw,cpu,cpuacct
";
const HYBRID_OWN: &str = "12:pids:/\n5:cpu,cpuacct:/\n4:memory:/box/1\n0::/\n";

#[test]
fn reads_mounts_and_own_cgroups() {
    let host = HostCgroups::parse(HYBRID_MOUNTS, HYBRID_OWN);
    assert_eq!(host.mounts.len(), 3, "cgroup file systems only");
    let v2 = host.v2_mount().unwrap();
    assert_eq!(v2.point, Path::new("/sys/fs/cgroup/unified"));
    assert!(!v2.read_only);
    assert_eq!(v2.root, "/");
    assert_eq!(host.own_v2.as_deref(), Some("/"));
    assert_eq!(
        host.own_v1[1],
        (
            vec!["cpu".to_string(), "cpuacct".to_string()],
            "/".to_string()
        )
    );
    assert_eq!(host.own_v1[2].1, "/box/1");
    let cpu = host
        .mounts
        .iter()
        .find(|m| m.super_options.iter().any(|o| o == "cpu"))
        .unwrap();
    assert_eq!(cpu.point, Path::new("/sys/fs/cgroup/cpu,cpuacct"));

    let pure = "30 1 0:26 / /sys/fs/cgroup rw,nosuid - cgroup2 cgroup2 rw\n\
                40 1 0:44 / /mnt/other\\040cg ro - cgroup2 cgroup2 rw\n";
    let host = HostCgroups::parse(pure, "0::/system.slice/noded.service\n");
    assert_eq!(host.v2_mount().unwrap().point, Path::new("/sys/fs/cgroup"));
    assert_eq!(host.mounts[1].point, Path::new("/mnt/other cg"));
    assert!(host.mounts[1].read_only);
    assert!(host.own_v1.is_empty());
    assert_eq!(mountinfo::unescape(r"a\040b\\c\0"), r"a b\\c\0");
}

#[test]
fn detected_root_is_the_delegated_unit_or_ysched() {
    let mount = Path::new("/sys/fs/cgroup");
    let never = |_: &Path| false;
    assert_eq!(
        detected_root(mount, Some("/"), never),
        Path::new("/sys/fs/cgroup/ysched")
    );
    assert_eq!(
        detected_root(mount, None, never),
        Path::new("/sys/fs/cgroup/ysched")
    );
    let unit = Path::new("/sys/fs/cgroup/system.slice/noded.service");
    let delegated_unit = |dir: &Path| dir == unit;
    // Delegate=yes with DelegateSubgroup=agent: noded runs in the unit's subgroup.
    assert_eq!(
        detected_root(
            mount,
            Some("/system.slice/noded.service/agent"),
            delegated_unit
        ),
        unit
    );
    // Delegate=yes alone: noded sits in the delegated cgroup itself, which may then not
    // hold cgroups with controllers.
    assert_eq!(
        detected_root(mount, Some("/system.slice/noded.service"), delegated_unit),
        Path::new("/sys/fs/cgroup/ysched")
    );
    assert_eq!(
        detected_root(mount, Some("/user.slice/session-1.scope"), never),
        Path::new("/sys/fs/cgroup/ysched")
    );
}

/// A directory tree that looks like cgroup file systems, to set up against.
struct FakeHost {
    tmp: tempfile::TempDir,
}

impl FakeHost {
    fn new(v2_controllers: &str) -> FakeHost {
        let fake = FakeHost {
            tmp: tempfile::tempdir().unwrap(),
        };
        let v2 = fake.v2();
        std::fs::create_dir_all(v2.join("jobs")).unwrap();
        std::fs::write(v2.join("cgroup.controllers"), v2_controllers).unwrap();
        for dir in [v2.clone(), v2.join("jobs")] {
            std::fs::write(dir.join("cgroup.procs"), "").unwrap();
            std::fs::write(dir.join("cgroup.subtree_control"), "").unwrap();
        }
        // This process, in the top cgroup (its /proc/self/cgroup says `0::/`).
        std::fs::write(
            v2.join("cgroup.procs"),
            format!("1\n{}\n", std::process::id()),
        )
        .unwrap();
        std::fs::create_dir_all(fake.v1_memory()).unwrap();
        fake
    }

    fn v2(&self) -> PathBuf {
        self.tmp.path().join("v2")
    }

    fn v1_memory(&self) -> PathBuf {
        self.tmp.path().join("memory")
    }

    fn host(&self) -> HostCgroups {
        let mountinfo = format!(
            "1 0 0:1 / {} rw - cgroup2 cgroup2 rw\n2 0 0:2 / {} rw - cgroup cgroup rw,memory\n",
            self.v2().display(),
            self.v1_memory().display()
        );
        HostCgroups::parse(&mountinfo, "4:memory:/box\n0::/\n")
    }
}

#[test]
fn jobs_get_cgroups_with_v2_limits() {
    let fake = FakeHost::new("cpu memory pids");
    let root = fake.v2().join("jobs");
    let layout = fake
        .host()
        .set_up(&CgroupRoot::At(root.clone()), 64)
        .unwrap();
    assert_eq!(layout.root, root);
    assert_eq!(layout.root_name, "/jobs");
    assert_eq!(
        (&layout.memory, &layout.cpu, &layout.pids),
        (&LimitSource::V2, &LimitSource::V2, &LimitSource::V2)
    );

    let limits = JobLimits {
        mem_bytes: 100 << 20,
        cpus: 2,
    };
    let cgroup = layout.create_job_cgroup(7, "n1.0000abcd", limits).unwrap();
    assert_eq!(cgroup.dir, root.join("job_7.n1.0000abcd"));
    assert_eq!(cgroup.name, "/jobs/job_7.n1.0000abcd");
    assert!(cgroup.v1_dirs.is_empty());
    let read = |name: &str| std::fs::read_to_string(cgroup.dir.join(name)).unwrap();
    assert_eq!(read("memory.max"), "104857600");
    assert_eq!(read("cpu.max"), "200000 100000");
    assert_eq!(read("pids.max"), "64");

    // The name is taken (another noded on this host): the next one.
    let again = layout
        .create_job_cgroup(7, "n1.0000abcd", JobLimits::default())
        .unwrap();
    assert_eq!(again.dir, root.join("job_7.n1.0000abcd-2"));
    assert!(!again.dir.join("memory.max").exists(), "no limits asked");
    let shown = Containment::Cgroups(layout).to_string();
    assert!(
        shown.starts_with("cgroups: each job in its own cgroup under "),
        "{shown}"
    );
    assert!(shown.contains("memory limits by cgroup v2"), "{shown}");
}

#[test]
fn hybrid_hosts_take_limits_from_v1() {
    let fake = FakeHost::new("hugetlb");
    let layout = fake
        .host()
        .set_up(&CgroupRoot::At(fake.v2().join("jobs")), 0)
        .unwrap();
    let base = fake.v1_memory().join("box/ysched");
    assert_eq!(layout.memory, LimitSource::V1(base.clone()));
    assert!(base.is_dir(), "created under noded's own v1 cgroup");
    assert!(
        matches!(&layout.cpu, LimitSource::Unavailable(why) if why.contains("no cpu controller")
            && why.contains("no cgroup v1 cpu hierarchy")),
        "{:?}",
        layout.cpu
    );
    assert!(matches!(layout.pids, LimitSource::Unavailable(_)));

    let limits = JobLimits {
        mem_bytes: 4096,
        cpus: 3,
    };
    let cgroup = layout.create_job_cgroup(9, "n1.0000abcd", limits).unwrap();
    assert_eq!(cgroup.v1_dirs, vec![base.join("job_9.n1.0000abcd")]);
    assert_eq!(
        std::fs::read_to_string(base.join("job_9.n1.0000abcd/memory.limit_in_bytes")).unwrap(),
        "4096"
    );
    assert!(
        !cgroup.dir.join("cpu.max").exists(),
        "no CPU limit to be had"
    );
    let shown = Containment::Cgroups(layout).to_string();
    assert!(shown.contains("memory limits by cgroup v1 ("), "{shown}");
    assert!(shown.contains("no CPU limits ("), "{shown}");
}

#[test]
fn unusable_hierarchies_are_refused_with_a_reason() {
    let fake = FakeHost::new("memory");
    let outside = fake.tmp.path().join("elsewhere");
    let err = fake.host().set_up(&CgroupRoot::At(outside), 0).unwrap_err();
    assert!(
        err.contains("is not below the cgroup v2 hierarchy"),
        "{err}"
    );
    let not_a_cgroup = fake.v2().join("plain");
    std::fs::create_dir(&not_a_cgroup).unwrap();
    let err = fake
        .host()
        .set_up(&CgroupRoot::At(not_a_cgroup), 0)
        .unwrap_err();
    assert!(err.ends_with("is not a cgroup"), "{err}");

    // The mount shows a hierarchy this process is not in (another cgroup namespace's).
    std::fs::write(fake.v2().join("cgroup.procs"), "1\n").unwrap();
    let err = fake
        .host()
        .set_up(&CgroupRoot::At(fake.v2().join("jobs")), 0)
        .unwrap_err();
    assert!(err.contains("another cgroup namespace"), "{err}");

    let v1_only = HostCgroups::parse(
        "2 0 0:2 / /sys/fs/cgroup/memory rw - cgroup cgroup rw,memory\n",
        "4:memory:/\n",
    );
    let err = v1_only.set_up(&CgroupRoot::Detect, 0).unwrap_err();
    assert!(err.contains("no cgroup v2 hierarchy is mounted"), "{err}");
    let read_only = HostCgroups::parse(
        "1 0 0:1 / /sys/fs/cgroup ro,nosuid - cgroup2 cgroup2 rw\n",
        "0::/\n",
    );
    let err = read_only.set_up(&CgroupRoot::Detect, 0).unwrap_err();
    assert!(err.contains("mounted read-only"), "{err}");

    let off = Containment::set_up(&CgroupRoot::from_config("none"), 0);
    assert_eq!(
        off,
        Containment::ProcessGroups {
            reason: "node.cgroup_root = \"none\"".into()
        }
    );
    assert!(off
        .to_string()
        .starts_with("process groups only (node.cgroup_root = \"none\"): "));
    assert_eq!(CgroupRoot::from_config(""), CgroupRoot::Detect);
}

#[test]
fn only_old_empty_cgroups_count_as_leftovers() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("job_5");
    std::fs::create_dir(&dir).unwrap();
    let age = |dir: &Path| {
        let long_ago = std::time::SystemTime::now() - std::time::Duration::from_secs(3600);
        let handle = std::fs::File::open(dir).unwrap();
        handle.set_modified(long_ago).unwrap();
    };
    age(&dir);
    assert!(!remove_if_stale(&dir), "no cgroup.procs: not a cgroup");
    std::fs::write(dir.join("cgroup.procs"), "").unwrap();
    let fresh = tmp.path().join("job_6");
    std::fs::create_dir(&fresh).unwrap();
    std::fs::write(fresh.join("cgroup.procs"), "").unwrap();
    assert!(
        !remove_if_stale(&fresh),
        "just made: a launch may be under way"
    );
    std::fs::write(dir.join("cgroup.procs"), "4242\n").unwrap();
    age(&dir);
    assert!(!remove_if_stale(&dir), "a process is in it");
}

#[test]
fn v1_cgroups_only_for_the_limits_a_job_has_and_the_cpu_one_joined_after_exec() {
    let tmp = tempfile::tempdir().unwrap();
    let (v2, memory, cpu) = (
        tmp.path().join("v2"),
        tmp.path().join("memory"),
        tmp.path().join("cpu"),
    );
    for dir in [&v2, &memory, &cpu] {
        std::fs::create_dir_all(dir).unwrap();
    }
    let layout = CgroupLayout {
        root: v2.clone(),
        root_name: "/".into(),
        memory: LimitSource::V1(memory.clone()),
        cpu: LimitSource::V1(cpu.clone()),
        pids: LimitSource::Unavailable("node.job_pids_max is 0".into()),
        pids_max: 0,
    };
    // No memory limit: no v1 memory cgroup to join (and no grace period to wait for).
    let cpus_only = JobLimits {
        mem_bytes: 0,
        cpus: 2,
    };
    let cgroup = layout
        .create_job_cgroup(3, "n1.0000abcd", cpus_only)
        .unwrap();
    let cpu_dir = cpu.join("job_3.n1.0000abcd");
    assert_eq!(cgroup.v1_dirs, vec![cpu_dir.clone()]);
    assert_eq!(cgroup.v1_joined_after_exec, vec![cpu_dir.clone()]);
    assert!(!memory.join("job_3.n1.0000abcd").exists());
    assert_eq!(
        std::fs::read_to_string(cpu_dir.join("cpu.cfs_quota_us")).unwrap(),
        "200000"
    );

    // A memory limit holds from the first instruction: joined before the exec.
    let both = JobLimits {
        mem_bytes: 4096,
        cpus: 1,
    };
    let cgroup = layout.create_job_cgroup(4, "n1.0000abcd", both).unwrap();
    let memory_dir = memory.join("job_4.n1.0000abcd");
    assert_eq!(
        cgroup.v1_dirs,
        vec![memory_dir.clone(), cpu.join("job_4.n1.0000abcd")]
    );
    assert_eq!(
        cgroup.v1_joined_after_exec,
        vec![cpu.join("job_4.n1.0000abcd")]
    );

    // memory and cpu mounted together: one directory, joined before the exec.
    let together = CgroupLayout {
        cpu: LimitSource::V1(memory.clone()),
        ..layout
    };
    let cgroup = together.create_job_cgroup(5, "n1.0000abcd", both).unwrap();
    assert_eq!(cgroup.v1_dirs, vec![memory.join("job_5.n1.0000abcd")]);
    assert!(cgroup.v1_joined_after_exec.is_empty());
}

#[test]
fn a_job_cgroup_name_is_known_as_its_agents_only() {
    let ours = instance_tag("n3", Path::new("/var/spool/a"));
    let theirs = instance_tag("n3", Path::new("/var/spool/b"));
    for attempt in [1, 2, 100] {
        let name = job_cgroup_name(17, &ours, attempt);
        assert!(is_job_cgroup_of(&name, &ours), "{name}");
        assert!(!is_job_cgroup_of(&name, &theirs), "{name}");
    }
    for other in [
        format!("job_x.{ours}"),
        format!("job_1.{ours}-"),
        format!("job_1.{ours}-x"),
        format!("job_1.{ours}x"),
        format!("task_1.{ours}"),
        ours.clone(),
    ] {
        assert!(!is_job_cgroup_of(&other, &ours), "{other}");
    }
}
