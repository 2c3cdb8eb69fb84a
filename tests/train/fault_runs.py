#!/usr/bin/env python3
"""fsdp-train under faults, driven as an operator would meet them (docs/reliability.md).

  fault_runs.py stopped --mpiexec M --train T
      Rank 1 of 3 is stopped (SIGSTOP) in the middle of training, as a rank stuck in its own
      computation or swapped out would be. With FSDP_COLLECTIVE_TIMEOUT_S=3 the other ranks must
      give up with a message naming rank 1, and the job must end (nonzero) instead of hanging.

  fault_runs.py killed --mpiexec M --train T
      Rank 1 of 3 is killed (SIGKILL) in the middle of training: the job must end (nonzero)
      within seconds, not wait for it.

  fault_runs.py full-disk --mpiexec M --train T --solve S --dir D
      Outputs written to a file system that fills up (a 150 KiB tmpfs mounted on D; needs root,
      skipped with exit code 77 where mount is refused): a checkpoint that no longer fits is an
      error on every rank (exit 1, "not enough space") and "latest" still names the previous,
      complete checkpoint; a resumed run that would need room for another checkpoint, or whose
      file system is remounted read-only, fails before its first step; --write-data and
      fsdp-solve --write-graph fail and leave the old file as it was. No temporary file is left
      behind, and nothing hangs.

  fault_runs.py write-fails --mpiexec M --train T --dir D
      A write of a checkpoint fails on one rank only, after the space check passed, as when
      another job fills the disk while the ranks write: rank 1 of 2 ignores SIGXFSZ, and once the
      first checkpoint is saved its file size limit (RLIMIT_FSIZE, set from outside with prlimit)
      drops to 4 KiB, so its own part of the next checkpoint fails with EFBIG while rank 0's
      succeeds. The job must stop with exit 1 naming rank 1's failed write and its reason, within
      120 s (the ranks used to end up in different collective HDF5 calls and hang), "latest" must
      name a complete checkpoint that a run resumes from, and no temporary file may be left.

Exits 0 when everything holds, 1 with a message otherwise.
"""
import argparse
import os
import signal
import subprocess
import sys
import time
import uuid

SKIP = 77


def fail(message):
    print("fault_runs: FAIL: " + message, flush=True)
    sys.exit(1)


def ranks_of(marker):
    """The pids of this run's ranks, by MPI rank: the processes whose environment holds marker."""
    found = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open("/proc/%s/environ" % entry, "rb") as f:
                environment = f.read().split(b"\0")
        except OSError:
            continue
        if ("FSDP_FAULT_RUN=" + marker).encode() not in environment:
            continue
        for variable in environment:
            if variable.startswith(b"OMPI_COMM_WORLD_RANK="):
                found[int(variable.split(b"=", 1)[1])] = int(entry)
    return found


def end_job(job, marker):
    """Kills the job if it still runs, and any rank it left behind (a stopped one, say)."""
    if job.poll() is None:
        job.kill()
        job.wait()
    for pid in ranks_of(marker).values():
        try:
            os.kill(pid, signal.SIGKILL)
        except OSError:
            pass


def signal_rank_1(args, sig, extra_env):
    """Starts a long 3-rank training, sends sig to rank 1 once it trains, and returns the exit
    code, the output and the seconds from the signal to the end of the job."""
    marker = uuid.uuid4().hex
    env = dict(os.environ, FSDP_FAULT_RUN=marker, **extra_env)
    command = [args.mpiexec, "-n", "3", args.train, "--samples", "2048", "--epochs", "1000000"]
    print("$ " + " ".join(command), flush=True)
    job = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                           env=env)
    try:
        ranks = {}
        deadline = time.monotonic() + 60
        while len(ranks) < 3 and time.monotonic() < deadline and job.poll() is None:
            time.sleep(0.2)
            ranks = ranks_of(marker)
        if len(ranks) < 3:
            fail("the 3 ranks did not start: %s" % ranks)
        time.sleep(2.0)  # into training: well past MPI_Init and the first collectives
        if job.poll() is not None:
            fail("the training ended before rank 1 was signalled")
        print("sending %s to rank 1 (pid %d)" % (signal.Signals(sig).name, ranks[1]), flush=True)
        os.kill(ranks[1], sig)
        signalled = time.monotonic()
        try:
            output, _ = job.communicate(timeout=120)
        except subprocess.TimeoutExpired:
            fail("the job still runs 120 s after rank 1 was signalled: it hangs")
        return job.returncode, output, time.monotonic() - signalled
    finally:
        end_job(job, marker)


def stopped(args):
    code, output, seconds = signal_rank_1(args, signal.SIGSTOP, {"FSDP_COLLECTIVE_TIMEOUT_S": "3"})
    print(output[-3000:], flush=True)
    print("the job ended %.1f s after rank 1 was stopped, exit code %d" % (seconds, code))
    if code == 0:
        fail("the job exited 0 with a stopped rank")
    if "timed out after 3 s" not in output or "rank 1 did not arrive" not in output:
        fail("no rank said that rank 1 did not arrive within the timeout")


def killed(args):
    code, output, seconds = signal_rank_1(args, signal.SIGKILL, {})
    print(output[-3000:], flush=True)
    print("the job ended %.1f s after rank 1 was killed, exit code %d" % (seconds, code))
    if code == 0:
        fail("the job exited 0 with a killed rank")


def run(command, expect_ok=True):
    print("$ " + " ".join(command), flush=True)
    result = subprocess.run(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            timeout=120)
    print(result.stdout[-3000:], flush=True)
    if expect_ok and result.returncode != 0:
        fail("exit code %d from: %s" % (result.returncode, " ".join(command)))
    return result


def read(path):
    with open(path, "rb") as f:
        return f.read()


def no_temporaries(directory):
    left = [name for name in os.listdir(directory) if name.endswith(".tmp")]
    if left:
        fail("temporary files left in %s: %s" % (directory, left))


def full_disk(args):
    os.makedirs(args.dir, exist_ok=True)
    if subprocess.run(["mount", "-t", "tmpfs", "-o", "size=150k", "tmpfs", args.dir]).returncode:
        print("fault_runs: SKIP: cannot mount a tmpfs on %s (root is needed)" % args.dir)
        sys.exit(SKIP)
    try:
        checkpoints = os.path.join(args.dir, "checkpoints")
        # One checkpoint (84 KB) fits; the second, at step 28, does not.
        result = run([args.mpiexec, "-n", "2", args.train, "--samples", "2048", "--epochs", "3",
                      "--checkpoint-dir", checkpoints, "--checkpoint-every", "14"],
                     expect_ok=False)
        if result.returncode != 1:
            fail("a checkpoint that does not fit gave exit code %d, not 1" % result.returncode)
        if "not enough space" not in result.stdout:
            fail("the full disk was not named")
        with open(os.path.join(checkpoints, "latest")) as f:
            latest = f.read().strip()
        if latest != "checkpoint-00000014.h5":
            fail("latest names %s, not the complete checkpoint of step 14" % latest)
        no_temporaries(checkpoints)
        run([args.mpiexec, "-n", "2", args.train, "--samples", "2048", "--epochs", "1",
             "--checkpoint-dir", checkpoints, "--resume"])

        # A run that would train and then find no room for its checkpoint, or a directory it
        # cannot write (the file system remounted read-only: as root, permission bits would not
        # stop a write), fails before its first step, naming the check (it trained every epoch
        # and failed at the final save before).
        more = [args.mpiexec, "-n", "2", args.train, "--samples", "2048", "--epochs", "3",
                "--checkpoint-dir", checkpoints, "--resume"]
        result = run(more, expect_ok=False)
        if result.returncode != 1 or "takes a checkpoint: not enough space" not in result.stdout:
            fail("a resumed run with no room for a checkpoint did not fail before training")
        if subprocess.run(["mount", "-o", "remount,ro", args.dir]).returncode:
            fail("cannot remount %s read-only" % args.dir)
        try:
            result = run(more, expect_ok=False)
        finally:
            subprocess.run(["mount", "-o", "remount,rw", args.dir], check=True)
        if result.returncode != 1 or "takes a checkpoint" not in result.stdout or \
                "Read-only file system" not in result.stdout:
            fail("a resumed run in a read-only directory did not fail before training")
        with open(os.path.join(checkpoints, "latest")) as f:
            if f.read().strip() != latest:
                fail("latest changed")
        no_temporaries(checkpoints)

        # Outputs of one rank: the old file stays as it was.
        os.remove(os.path.join(checkpoints, latest))
        data = os.path.join(args.dir, "data.h5")
        run([args.train, "--samples", "256", "--epochs", "1", "--write-data", data])
        before = read(data)
        result = run([args.train, "--samples", "4096", "--epochs", "1", "--write-data", data],
                     expect_ok=False)
        if result.returncode != 1 or read(data) != before:
            fail("--write-data on a full disk: exit %d, old file %s" %
                 (result.returncode, "kept" if read(data) == before else "changed"))
        graph = os.path.join(args.dir, "graph.json")
        run([args.solve, "--generate", "mlp", "--write-graph", graph])
        before = read(graph)
        with open(os.path.join(args.dir, "filler"), "wb") as f:
            try:
                f.write(b"\0" * (1 << 20))
            except OSError:
                pass  # the file system is full now, as wanted
        result = run([args.solve, "--generate", "transformer", "--write-graph", graph],
                     expect_ok=False)
        if result.returncode != 1 or read(graph) != before:
            fail("--write-graph on a full disk: exit %d, old file %s" %
                 (result.returncode, "kept" if read(graph) == before else "changed"))
        no_temporaries(args.dir)
    finally:
        subprocess.run(["umount", "-l", args.dir])  # lazily: a process left over may hold it


def write_fails(args):
    import resource
    checkpoints = os.path.join(args.dir, "checkpoints")
    subprocess.run(["rm", "-rf", args.dir])
    os.makedirs(checkpoints)
    marker = uuid.uuid4().hex
    env = dict(os.environ, FSDP_FAULT_RUN=marker)
    train = [args.train, "--samples", "2048", "--epochs", "1000000", "--checkpoint-dir",
             checkpoints, "--checkpoint-every", "14"]
    # Rank 1 through a shell that ignores SIGXFSZ (an ignored signal stays ignored across exec):
    # a write past the limit then fails with EFBIG instead of killing the rank.
    command = [args.mpiexec, "-n", "1"] + train + [":", "-n", "1", "sh", "-c",
                                                   'trap "" XFSZ; exec "$@"', "sh"] + train
    print("$ " + " ".join(command), flush=True)
    job = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                           env=env)
    try:
        latest = os.path.join(checkpoints, "latest")
        deadline = time.monotonic() + 60
        while not os.path.exists(latest) and time.monotonic() < deadline and job.poll() is None:
            time.sleep(0.05)
        ranks = ranks_of(marker)
        if job.poll() is not None or 1 not in ranks:
            fail("the job ended or rank 1 was not found before the first checkpoint: %s" % ranks)
        print("rank 1 (pid %d) may now write only 4 KiB into a file" % ranks[1], flush=True)
        resource.prlimit(ranks[1], resource.RLIMIT_FSIZE, (4096, 4096))
        try:
            output, _ = job.communicate(timeout=120)
        except subprocess.TimeoutExpired:
            fail("the job still runs 120 s after rank 1's writes began to fail: it hangs")
    finally:
        end_job(job, marker)
    print(output[-3000:], flush=True)
    if job.returncode != 1:
        fail("a write that failed on rank 1 gave exit code %d, not 1" % job.returncode)
    if "rank 1 could not write" not in output or "File too large" not in output:
        fail("rank 1's failed write was not named, with its reason")
    with open(latest) as f:
        name = f.read().strip()
    no_temporaries(checkpoints)
    run([args.mpiexec, "-n", "2", args.train, "--samples", "2048", "--epochs", "1",
         "--checkpoint-dir", checkpoints, "--resume"])
    print("latest named %s, which a run resumed from" % name)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("case", choices=["stopped", "killed", "full-disk", "write-fails"])
    parser.add_argument("--mpiexec", required=True)
    parser.add_argument("--train", required=True)
    parser.add_argument("--solve")
    parser.add_argument("--dir")
    args = parser.parse_args()
    {"stopped": stopped, "killed": killed, "full-disk": full_disk,
     "write-fails": write_fails}[args.case](args)
    print("fault_runs: %s: all checks passed" % args.case)


if __name__ == "__main__":
    main()
