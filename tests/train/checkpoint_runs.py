#!/usr/bin/env python3
"""fsdp-train checkpoints, driven as a user would: runs under mpiexec, files read with h5py.

  checkpoint_runs.py resume --mpiexec M --train T --dir D --first N --second K -- <train args>
      An uninterrupted run on N ranks; a run on N ranks stopped at --stop-after and resumed on K
      ranks. The final checkpoints must hold the same tensors: bit for bit when N == K, within
      fp64 round-off (relative 1e-12 of each tensor's largest value) otherwise.

  checkpoint_runs.py crash --mpiexec M --train T --dir D --ranks N -- <train args>
      A run stopped with a checkpoint; a resumed run whose rank 1 aborts in the middle of writing
      the next checkpoint (FSDP_CHECKPOINT_CRASH_RANK); then "latest" still names the previous
      checkpoint, which is unchanged, and a third run resumes from it and ends where an
      uninterrupted run ends.

Exits 0 when everything holds, 1 with a message otherwise.
"""
import argparse
import filecmp
import os
import shutil
import subprocess
import sys

import h5py
import numpy as np


def fail(message):
    print("checkpoint_runs: FAIL: " + message, flush=True)
    sys.exit(1)


def run(args, ranks, extra, env=None, expect_ok=True):
    command = [args.mpiexec, "-n", str(ranks), args.train] + args.train_args + extra
    print("$ " + " ".join(command), flush=True)
    result = subprocess.run(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            text=True, env=env, timeout=300)
    print(result.stdout, flush=True)
    if expect_ok and result.returncode != 0:
        fail("exit code %d from: %s" % (result.returncode, " ".join(command)))
    return result


def latest(directory):
    with open(os.path.join(directory, "latest")) as f:
        return os.path.join(directory, f.read().strip())


def tensors(path):
    """Every dataset of a checkpoint, by name, as numpy arrays (what any h5py user gets)."""
    out = {}
    with h5py.File(path, "r") as f:
        f.visititems(lambda name, obj: out.__setitem__(name, obj[()])
                     if isinstance(obj, h5py.Dataset) else None)
    return out


def compare(expected_path, actual_path, exact):
    expected, actual = tensors(expected_path), tensors(actual_path)
    if sorted(expected) != sorted(actual):
        fail("the checkpoints hold different tensors: %s vs %s" % (sorted(expected), sorted(actual)))
    worst = 0.0
    for name, e in expected.items():
        a = actual[name]
        if e.shape != a.shape or e.dtype != a.dtype:
            fail("%s: %s %s vs %s %s" % (name, e.shape, e.dtype, a.shape, a.dtype))
        if exact:
            if not np.array_equal(e, a):
                fail("%s differs (bit for bit expected): largest difference %g" %
                     (name, np.max(np.abs(e - a))))
        else:
            relative = np.max(np.abs(e - a)) / max(np.max(np.abs(e)), 1e-300)
            worst = max(worst, relative)
            if relative > 1e-12:
                fail("%s differs by %g relative (1e-12 allowed)" % (name, relative))
    print("checkpoint_runs: %d tensors %s (largest relative difference %.3g)" %
          (len(expected), "identical" if exact else "equal within round-off", worst), flush=True)


def resume(args):
    shutil.rmtree(args.dir, ignore_errors=True)
    whole, chain = os.path.join(args.dir, "whole"), os.path.join(args.dir, "chain")
    run(args, args.first, ["--checkpoint-dir", whole])
    run(args, args.first, ["--checkpoint-dir", chain, "--checkpoint-every", "3",
                           "--stop-after", str(args.stop_after)])
    stopped = latest(chain)
    with h5py.File(stopped, "r") as f:
        if int(f.attrs["step"]) != args.stop_after or int(f.attrs["world_size"]) != args.first:
            fail("%s: step %s, world size %s; expected %d and %d" %
                 (stopped, f.attrs["step"], f.attrs["world_size"], args.stop_after, args.first))
    run(args, args.second, ["--checkpoint-dir", chain, "--resume"])
    compare(latest(whole), latest(chain), exact=args.first == args.second)


def crash(args):
    shutil.rmtree(args.dir, ignore_errors=True)
    whole, chain = os.path.join(args.dir, "whole"), os.path.join(args.dir, "chain")
    run(args, args.ranks, ["--checkpoint-dir", whole])
    run(args, args.ranks, ["--checkpoint-dir", chain, "--stop-after", str(args.stop_after)])
    before = latest(chain)
    kept = os.path.join(args.dir, "before-crash.h5")
    shutil.copyfile(before, kept)
    env = dict(os.environ, FSDP_CHECKPOINT_CRASH_RANK="1")
    crashed = run(args, args.ranks, ["--checkpoint-dir", chain, "--resume", "--checkpoint-every",
                                     "2"], env=env, expect_ok=False)
    if crashed.returncode == 0 or "FSDP_CHECKPOINT_CRASH_RANK=1: rank 1 aborts" not in crashed.stdout:
        fail("the run with FSDP_CHECKPOINT_CRASH_RANK=1 did not crash while saving")
    leftovers = [n for n in os.listdir(chain) if n.endswith(".tmp")]
    if not leftovers:
        fail("no temporary was left by the crash: did it happen while writing?")
    if latest(chain) != before:
        fail("after the crash 'latest' names %s, not %s" % (latest(chain), before))
    if not filecmp.cmp(before, kept, shallow=False):
        fail("the previous checkpoint %s changed during the crashed save" % before)
    tensors(before)  # it still opens and reads as plain arrays
    run(args, args.ranks, ["--checkpoint-dir", chain, "--resume"])
    leftovers = [n for n in os.listdir(chain) if n.endswith(".tmp")]
    if leftovers:
        fail("temporaries left after a resumed run: %s" % leftovers)
    compare(latest(whole), latest(chain), exact=True)


def main():
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("mode", choices=["resume", "crash"])
    parser.add_argument("--mpiexec", required=True)
    parser.add_argument("--train", required=True)
    parser.add_argument("--dir", required=True)
    parser.add_argument("--first", type=int, default=4)
    parser.add_argument("--second", type=int, default=4)
    parser.add_argument("--ranks", type=int, default=3)
    parser.add_argument("--stop-after", type=int, default=7)
    argv = sys.argv[1:]
    split = argv.index("--") if "--" in argv else len(argv)
    args = parser.parse_args(argv[:split])
    args.train_args = argv[split + 1:]
    resume(args) if args.mode == "resume" else crash(args)
    print("checkpoint_runs: all checks passed", flush=True)


if __name__ == "__main__":
    main()
