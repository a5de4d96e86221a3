//! Slurm's commands from `yslurm` (sbatch, squeue, scancel, sinfo, sacct, srun) against a
//! real cluster: the formats tools parse, `SLURM_*` in jobs, `--open-mode=append`, `srun`'s
//! tasks, `yslurm install` never shadowing another program, and submitit from PyPI running a
//! function and a job array through them.

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::Duration;
use ysched_tests::*;

const A100: &str = "NVIDIA A100-SXM4-80GB";
const SECS: fn(u64) -> Duration = Duration::from_secs;

/// `yslurm install DIR` with the tools linked to the cluster's copy of yslurm.
fn install(c: &TestCluster, dir: &Path, path_var: &str) -> Output {
    let yslurm = c.bin_copy("yslurm");
    TestCluster::output_when_free(
        c.program(&yslurm)
            .args(["install", &dir.display().to_string()])
            .env("PATH", path_var)
            .stdin(Stdio::null()),
    )
    .expect("run yslurm install")
}

/// A Slurm command from the links in `bin`, with `bin` first on PATH (as the jobs see it).
fn slurm(c: &TestCluster, bin: &Path, tool: &str) -> Command {
    let mut command = c.program(&bin.join(tool));
    command.env("PATH", path_with(bin)).stdin(Stdio::null());
    command
}

fn path_with(bin: &Path) -> String {
    format!(
        "{}:{}",
        bin.display(),
        std::env::var("PATH").unwrap_or_else(|_| "/usr/bin:/bin".into())
    )
}

fn ok(out: Output, what: &str, c: &TestCluster) -> String {
    assert!(
        out.status.success(),
        "{what} failed: {}\n{}\n{}",
        stdout(&out),
        stderr(&out),
        c.logs()
    );
    stdout(&out)
}

fn installed(c: &TestCluster) -> PathBuf {
    let bin = c.dir.path().join("slurm-bin");
    let out = install(c, &bin, &path_with(&bin));
    ok(out, "yslurm install", c);
    bin
}

#[test]
fn slurms_commands_submit_list_account_and_cancel_in_slurms_formats() {
    let c = TestCluster::start(vec![
        FakeNode::uniform("n1", 2, A100),
        FakeNode::uniform("n2", 2, A100),
    ]);
    let bin = installed(&c);
    let work = c.work.display().to_string();

    // A Slurm script: SLURM_* variables, srun's tasks each with its rank and file, and an
    // output file opened for append (what was there stays).
    std::fs::write(c.path("kept.out"), "written before the job\n").unwrap();
    let script = c.script(
        "slurm.sh",
        &format!(
            "#!/bin/sh\n\
             #SBATCH -J envjob\n\
             #SBATCH --output={work}/kept.out\n\
             #SBATCH --open-mode=append\n\
             #SBATCH --ntasks-per-node=2\n\
             #SBATCH --time=5\n\
             env | grep -E '^(SLURM|YS)_' | sort > {work}/env-$SLURM_JOB_ID.txt\n\
             srun --output {work}/task-%j-%t.out sh -c 'echo rank $SLURM_PROCID local $SLURM_LOCALID of $SLURM_NTASKS'\n\
             echo after srun $?\n"
        ),
    );
    let out = TestCluster::output_when_free(
        slurm(&c, &bin, "sbatch").args(["--parsable", &script.display().to_string()]),
    )
    .unwrap();
    let id: u64 = ok(out, "sbatch --parsable", &c)
        .trim()
        .parse()
        .expect("job id");
    c.wait_state(id, "COMPLETED", SECS(60));
    let env = std::fs::read_to_string(c.path(&format!("env-{id}.txt"))).unwrap();
    for line in [
        format!("SLURM_JOB_ID={id}"),
        format!("SLURM_JOBID={id}"),
        "SLURM_JOB_NAME=envjob".into(),
        "SLURM_NTASKS_PER_NODE=2".into(),
        "SLURM_NTASKS=2".into(),
        "SLURM_PROCID=0".into(),
        "SLURM_NODEID=0".into(),
        "SLURM_JOB_NUM_NODES=1".into(),
        "SLURM_CLUSTER_NAME=ysched".into(),
        "SLURM_OPEN_MODE=a".into(),
        format!("SLURM_SUBMIT_DIR={work}"),
        "YS_NTASKS_PER_NODE=2".into(),
        "YS_NTASKS=2".into(),
    ] {
        assert!(env.lines().any(|l| l == line), "{line} missing from\n{env}");
    }
    assert!(env.contains("SLURM_SUBMIT_HOST="), "{env}");
    assert!(env.contains("SLURM_JOB_NODELIST=n"), "{env}");
    for rank in 0..2 {
        let task = std::fs::read_to_string(c.path(&format!("task-{id}-{rank}.out"))).unwrap();
        assert_eq!(task, format!("rank {rank} local {rank} of 2\n"));
    }
    let kept = std::fs::read_to_string(c.path("kept.out")).unwrap();
    assert_eq!(kept, "written before the job\nafter srun 0\n");

    // sbatch's default line; squeue's columns while it runs; scancel; sacct's account of it.
    let out = TestCluster::output_when_free(slurm(&c, &bin, "sbatch").args([
        "-J",
        "sleeper",
        "--wrap",
        "sleep 300",
    ]))
    .unwrap();
    let line = ok(out, "sbatch", &c);
    let sleeper: u64 = line
        .trim()
        .strip_prefix("Submitted batch job ")
        .unwrap_or_else(|| panic!("sbatch said {line:?}"))
        .parse()
        .unwrap();
    c.wait_state(sleeper, "RUNNING", SECS(30));
    let out = TestCluster::output_when_free(slurm(&c, &bin, "squeue").args([
        "-h",
        "-o",
        "%i|%j|%t|%T|%D|%P",
        "-j",
        &sleeper.to_string(),
    ]))
    .unwrap();
    assert_eq!(
        ok(out, "squeue -o", &c),
        format!("{sleeper}|sleeper|R|RUNNING|1|medium\n")
    );
    let out = TestCluster::output_when_free(&mut slurm(&c, &bin, "squeue")).unwrap();
    let listing = ok(out, "squeue", &c);
    assert!(
        listing.starts_with(
            "             JOBID PARTITION     NAME     USER ST       TIME  NODES NODELIST(REASON)\n"
        ),
        "{listing}"
    );
    let out =
        TestCluster::output_when_free(slurm(&c, &bin, "sinfo").args(["-h", "-o", "%P %D %t"]))
            .unwrap();
    assert_eq!(ok(out, "sinfo", &c), sinfo_lines(&c));

    // scancel refuses --signal; cancels by id.
    let out = TestCluster::output_when_free(slurm(&c, &bin, "scancel").args([
        "--signal",
        "USR1",
        &sleeper.to_string(),
    ]))
    .unwrap();
    assert_eq!(out.status.code(), Some(1));
    assert!(
        stderr(&out).starts_with("scancel: error: --signal is not supported"),
        "{}",
        stderr(&out)
    );
    let out =
        TestCluster::output_when_free(slurm(&c, &bin, "scancel").arg(sleeper.to_string())).unwrap();
    ok(out, "scancel", &c);
    c.wait_state(sleeper, "CANCELLED", SECS(30));

    let out = TestCluster::output_when_free(slurm(&c, &bin, "sacct").args([
        "-o",
        "JobID,JobName,State,ExitCode",
        "--parsable2",
        "-j",
        &format!("{id},{sleeper}"),
    ]))
    .unwrap();
    assert_eq!(
        ok(out, "sacct --parsable2", &c),
        format!(
            "JobID|JobName|State|ExitCode\n{id}|envjob|COMPLETED|0:0\n{}",
            cancelled_line(&c, sleeper)
        )
    );
    let out = TestCluster::output_when_free(slurm(&c, &bin, "sacct").args([
        "-o",
        "JobID,Bogus",
        "-j",
        &id.to_string(),
    ]))
    .unwrap();
    assert_eq!(out.status.code(), Some(1));
    assert!(
        stderr(&out).contains("Invalid field requested: \"Bogus\""),
        "{}",
        stderr(&out)
    );

    // Unknown sbatch options are refused by name, nothing submitted.
    let out = TestCluster::output_when_free(slurm(&c, &bin, "sbatch").args([
        "--licenses=matlab",
        "--wrap",
        "true",
    ]))
    .unwrap();
    assert_eq!(out.status.code(), Some(1));
    assert!(
        stderr(&out).starts_with("sbatch: error: --licenses is not supported"),
        "{}",
        stderr(&out)
    );

    // srun outside a job: there is no interactive srun.
    let out = TestCluster::output_when_free(
        slurm(&c, &bin, "srun")
            .env_remove("YS_JOB_ID")
            .env_remove("SLURM_JOB_ID")
            .arg("true"),
    )
    .unwrap();
    assert_eq!(out.status.code(), Some(1));
    assert!(
        stderr(&out).contains("ysched has no interactive srun"),
        "{}",
        stderr(&out)
    );
}

/// sinfo's lines for the cluster as it is now: the nodes by state, n1 and n2 either way round.
fn sinfo_lines(c: &TestCluster) -> String {
    let nodes = c.nodes();
    let short = |state: &str| match state {
        "IDLE" => "idle",
        "MIXED" => "mix",
        "ALLOCATED" => "alloc",
        other => panic!("node state {other}"),
    };
    let mut lines: Vec<(String, usize)> = Vec::new();
    for node in &nodes {
        let state = short(node["state"].as_str().unwrap()).to_string();
        match lines.iter_mut().find(|(s, _)| *s == state) {
            Some((_, n)) => *n += 1,
            None => lines.push((state, 1)),
        }
    }
    lines
        .iter()
        .map(|(state, n)| format!("ysched* {n} {state}\n"))
        .collect()
}

/// sacct's line for the cancelled job `id`, its exit code and signal as ysched recorded them.
fn cancelled_line(c: &TestCluster, id: u64) -> String {
    let job = c.job(id);
    let code = job["exit_code"].as_i64().unwrap_or(0).clamp(0, 255);
    let signal = job["signal"].as_i64().unwrap_or(0).max(0);
    let uid = nix::unistd::getuid();
    format!("{id}|sleeper|CANCELLED by {uid}|{code}:{signal}\n")
}

#[test]
fn install_refuses_to_shadow_another_program_of_the_same_name() {
    let c = TestCluster::start(vec![FakeNode::uniform("n1", 1, A100)]);
    let slurm_dir = c.dir.path().join("real-slurm");
    std::fs::create_dir_all(&slurm_dir).unwrap();
    let real = slurm_dir.join("sbatch");
    std::fs::write(&real, "#!/bin/sh\necho real slurm\n").unwrap();
    std::fs::set_permissions(&real, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    let target = c.dir.path().join("compat-bin");
    let path_var = format!("{}:/usr/bin:/bin", slurm_dir.display());
    let out = install(&c, &target, &path_var);
    assert_eq!(out.status.code(), Some(1), "{}", stdout(&out));
    let err = stderr(&out);
    assert!(err.contains(&real.display().to_string()), "{err}");
    assert!(err.contains("--prefix ys-"), "{err}");
    assert!(!target.exists(), "nothing is installed");

    // With a prefix, the commands go in beside the real one, under their prefixed names.
    let yslurm = c.bin_copy("yslurm");
    let out = TestCluster::output_when_free(
        c.program(&yslurm)
            .args(["install", &target.display().to_string(), "--prefix", "ys-"])
            .env("PATH", &path_var),
    )
    .unwrap();
    ok(out, "yslurm install --prefix ys-", &c);
    let out = TestCluster::output_when_free(
        c.program(&target.join("ys-sinfo"))
            .args(["-h", "-o", "%n %t"]),
    )
    .unwrap();
    assert_eq!(ok(out, "ys-sinfo", &c), "n1 idle\n");
}

#[test]
fn submitit_runs_a_function_and_an_array_through_slurms_commands() {
    let venv = bin_dir()
        .parent()
        .expect("target dir")
        .join("submitit-venv");
    let python = venv.join("bin").join("python");
    let importable = Command::new(&python)
        .args([
            "-c",
            "import submitit; assert submitit.__version__ == '1.5.4'",
        ])
        .output()
        .is_ok_and(|out| out.status.success());
    if !importable {
        let why = std::fs::read_to_string(venv.with_extension("failed")).unwrap_or_default();
        let why = why.lines().last().unwrap_or("").trim().to_string();
        skipped(&format!(
            "submitit 1.5.4 is not installed in {} (scripts/test.sh makes it with pip where \
             python3's venv module and PyPI are available){}",
            venv.display(),
            if why.is_empty() {
                String::new()
            } else {
                format!(": {why}")
            }
        ));
        return;
    }
    let c = TestCluster::start(vec![
        FakeNode::uniform("n1", 2, A100),
        FakeNode::uniform("n2", 2, A100),
    ]);
    let bin = installed(&c);
    let folder = c.path("submitit");
    let driver = Path::new(env!("CARGO_MANIFEST_DIR")).join("submitit/driver.py");
    let mut child = TestCluster::spawn_when_free(
        c.program(&python)
            .arg(&driver)
            .arg(&folder)
            .env("PATH", path_with(&bin))
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped()),
    )
    .expect("run the submitit driver");
    let deadline = std::time::Instant::now() + SECS(240);
    while child.try_wait().unwrap().is_none() {
        if std::time::Instant::now() > deadline {
            let _ = child.kill();
            break;
        }
        std::thread::sleep(Duration::from_millis(200));
    }
    let out = child.wait_with_output().unwrap();
    let logs: String = std::fs::read_dir(&folder)
        .map(|entries| {
            entries
                .flatten()
                .filter(|e| {
                    e.path()
                        .extension()
                        .is_some_and(|x| x == "err" || x == "out")
                })
                .map(|e| {
                    format!(
                        "--- {}\n{}",
                        e.path().display(),
                        std::fs::read_to_string(e.path()).unwrap_or_default()
                    )
                })
                .collect()
        })
        .unwrap_or_default();
    assert!(
        out.status.success(),
        "the submitit driver failed ({:?}):\n{}\n{}\n{logs}\n{}",
        out.status,
        stdout(&out),
        stderr(&out),
        c.logs()
    );
    let said = stdout(&out);
    assert!(said.contains("add(2, 3) = 5"), "{said}");
    assert!(
        said.contains("square over [1, 2, 3, 4] = [1, 4, 9, 16]"),
        "{said}"
    );
}
