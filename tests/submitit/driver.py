"""submitit (1.5.4, from PyPI) driving ysched through yslurm's Slurm commands.

Run with yslurm's sbatch, sacct, scancel and srun first on PATH and YSCHED_CONF naming the
cluster (tests/tests/e2e/compat.rs does both): submits one function and a job array of four
through submitit's SlurmExecutor, as a Slurm user would, and checks every result. Exits 0 when
all came back right, 1 otherwise, printing what happened.

Usage: python driver.py FOLDER
"""

import sys
import time

import submitit


def add(a, b):
    return a + b


def square(x):
    return x * x


def main() -> int:
    folder = sys.argv[1]
    # "auto" picks Slurm when `srun` is on PATH, as on a Slurm cluster.
    executor = submitit.AutoExecutor(folder=folder)
    if executor.cluster != "slurm":
        print(f"submitit chose the {executor.cluster!r} executor, not slurm: is srun on PATH?")
        return 1
    executor.update_parameters(
        timeout_min=5,
        cpus_per_task=1,
        nodes=1,
        tasks_per_node=1,
        slurm_array_parallelism=4,
    )
    started = time.time()
    job = executor.submit(add, 2, 3)
    print(f"submitted add(2, 3) as job {job.job_id}", flush=True)
    inputs = [1, 2, 3, 4]
    array = executor.map_array(square, inputs)
    print(f"submitted square over {inputs} as {[j.job_id for j in array]}", flush=True)

    failures = []
    result = job.result()
    print(f"add(2, 3) = {result} (state {job.state})", flush=True)
    if result != 5:
        failures.append(f"add(2, 3) gave {result!r}")
    results = [j.result() for j in array]
    print(f"square over {inputs} = {results}", flush=True)
    if results != [x * x for x in inputs]:
        failures.append(f"map_array gave {results!r}")
    # The tasks' ids are Slurm's: the array's id and the task index.
    array_id = array[0].job_id.split("_")[0]
    expected_ids = [f"{array_id}_{i}" for i in range(len(inputs))]
    if [j.job_id for j in array] != expected_ids:
        failures.append(f"array task ids {[j.job_id for j in array]} != {expected_ids}")
    # sacct as submitit reads it: every job COMPLETED. A result is there as soon as the task
    # wrote it, while its script may still be finishing (RUNNING, as on Slurm): look until
    # every job has ended, for at most a minute.
    deadline = time.time() + 60
    while True:
        states = [job.watcher.get_state(j.job_id, mode="force") for j in [job, *array]]
        if all(state not in ("PENDING", "RUNNING", "COMPLETING") for state in states):
            break
        if time.time() > deadline:
            break
        time.sleep(0.2)
    print(f"states {states}", flush=True)
    if any(state != "COMPLETED" for state in states):
        failures.append(f"states {states}")
    print(f"took {time.time() - started:.1f}s")
    for failure in failures:
        print(f"FAILED: {failure}")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
