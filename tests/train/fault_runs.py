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
      complete checkpoint; --write-data and fsdp-solve --write-graph fail and leave the old file
      as it was. No temporary file is left behind, and nothing hangs.

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
        if job.poll() is None:
            job.kill()
            job.wait()
        for pid in ranks_of(marker).values():  # a stopped rank the job left behind
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass


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


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("case", choices=["stopped", "killed", "full-disk"])
    parser.add_argument("--mpiexec", required=True)
    parser.add_argument("--train", required=True)
    parser.add_argument("--solve")
    parser.add_argument("--dir")
    args = parser.parse_args()
    {"stopped": stopped, "killed": killed, "full-disk": full_disk}[args.case](args)
    print("fault_runs: %s: all checks passed" % args.case)


if __name__ == "__main__":
    main()
