#!/usr/bin/env python3
"""fsdp-train checkpoints, driven as a user would: runs under mpiexec, files read with h5py.

  checkpoint_runs.py resume --mpiexec M --train T --dir D --first N --second K [--also A ...]
                            -- <train args>
      An uninterrupted run on N ranks; a run on N ranks stopped at --stop-after and resumed on K
      ranks. The final checkpoints must hold the same tensors: bit for bit when N == K, within
      fp64 round-off (relative 1e-12 of each tensor's largest value) otherwise. With --also,
      uninterrupted runs on each A ranks too, each within round-off of the one on N.

  checkpoint_runs.py crash --mpiexec M --train T --dir D --ranks N -- <train args>
      A run stopped with a checkpoint; a resumed run whose rank 1 aborts in the middle of writing
      the next checkpoint (FSDP_CHECKPOINT_CRASH_RANK); then "latest" still names the previous
      checkpoint, which is unchanged, and a third run resumes from it and ends where an
      uninterrupted run ends.

  checkpoint_runs.py tools --mpiexec M --train T --ckpt C --dir D [--format-1 F] [--tensor NAME]
                     -- <train args>
      fsdp-ckpt inspect (text and --json, on a file and on a directory), verify (a sound file,
      and a copy with one flipped byte, which must fail naming the tensor; one with its root
      group's object header damaged, with no "infinite loop closing library" from HDF5 at exit), the same damaged copy refused by export (no file written) and by
      fsdp-train --init-from, a copy whose model group was emptied refused by verify and export
      (naming the tensors its header lists), a copy of step -5 refused by inspect and --resume,
      h5dump -H on the file, export (compared
      with the checkpoint through h5py, then the start of a run with fsdp-train --init-from,
      whose --keep-last leaves a stray checkpoint-99999999999999999999.h5 alone),
      upgrade (a copy rewritten with variable-length strings as format version 1 stored them,
      which every reader refuses, fsdp-train --resume included, and which upgrades to a file of
      the same attributes and tensors, bit for bit, from which a resumed run ends where one
      resumed from the original ends; and F, a checkpoint an fsdp of format version 1 wrote),
      and its usage errors.

  checkpoint_runs.py compare EXPECTED ACTUAL [--exact]
      The two checkpoints (files or directories) hold the same tensors (bit for bit with --exact).

Exits 0 when everything holds, 1 with a message otherwise.
"""
import argparse
import filecmp
import json
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


def object_states(path):
    """The state of each named object (the /state group's attributes), parsed from its JSON."""
    with h5py.File(path, "r") as f:
        if "state" not in f:
            return {}
        return {key: json.loads(value.decode() if isinstance(value, bytes) else value)
                for key, value in f["state"].attrs.items()}


def resume(args):
    shutil.rmtree(args.dir, ignore_errors=True)
    whole, chain = os.path.join(args.dir, "whole"), os.path.join(args.dir, "chain")
    run(args, args.first, ["--checkpoint-dir", whole])
    chained = run(args, args.first, ["--checkpoint-dir", chain, "--checkpoint-every", "3",
                                     "--stop-after", str(args.stop_after)])
    # The saves of --checkpoint-every go in the background unless the arguments ask otherwise;
    # the stop's save is written before the run ends.
    background = "--sync-checkpoints" not in args.train_args
    if ("step 3 saved to" not in chained.stdout or
            ("step 3 saved to %s (in the background" % os.path.join(chain, "checkpoint-00000003.h5")
             in chained.stdout) != background):
        fail("step 3's checkpoint was not saved %s" %
             ("in the background" if background else "before the run went on"))
    stopped = latest(chain)
    with h5py.File(stopped, "r") as f:
        if int(f.attrs["step"]) != args.stop_after or int(f.attrs["world_size"]) != args.first:
            fail("%s: step %s, world size %s; expected %d and %d" %
                 (stopped, f.attrs["step"], f.attrs["world_size"], args.stop_after, args.first))
    run(args, args.second, ["--checkpoint-dir", chain, "--resume"])
    compare(latest(whole), latest(chain), exact=args.first == args.second)
    # The objects' states (fp16's loss scaler) go on from the resume as they would have.
    expected_states, resumed_states = object_states(latest(whole)), object_states(latest(chain))
    if "--mixed-precision fp16" in " ".join(args.train_args) and "loss_scaler" not in expected_states:
        fail("%s holds no state for the loss scaler" % latest(whole))
    if resumed_states != expected_states:
        fail("the objects' states differ: %s uninterrupted, %s resumed" %
             (expected_states, resumed_states))
    for ranks in args.also:
        other = os.path.join(args.dir, "whole-%d" % ranks)
        run(args, ranks, ["--checkpoint-dir", other])
        compare(latest(whole), latest(other), exact=ranks == args.first)


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


def tool(args, arguments, expect):
    command = [args.ckpt] + arguments
    print("$ " + " ".join(command), flush=True)
    result = subprocess.run(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            timeout=120)
    print(result.stdout + result.stderr, flush=True)
    if result.returncode != expect:
        fail("exit code %d, expected %d, from: %s" % (result.returncode, expect, " ".join(command)))
    return result


def make_format_1(path):
    """Rewrites a checkpoint as format version 1 stored it: every string attribute a
    variable-length UTF-8 string, format_version 1."""
    with h5py.File(path, "r+") as f:
        groups = [f, f["metadata"]] + [f[g] for g in ("optimizer", "state") if g in f]
        for group in groups:
            for key in list(group.attrs):
                value = group.attrs[key]
                if isinstance(value, bytes):
                    del group.attrs[key]
                    group.attrs.create(key, value.decode(), dtype=h5py.string_dtype())
        f.attrs["format_version"] = np.int32(1)


def attributes(path):
    """Every attribute of the root, metadata, optimizer and state groups, strings as str, but
    the format version and the fsdp version that wrote the file."""
    out = {}
    with h5py.File(path, "r") as f:
        for group in ("/", "metadata", "optimizer", "state"):
            if group in f:
                for key, value in f[group].attrs.items():
                    if key not in ("format_version", "library_version"):
                        value = value.decode() if isinstance(value, bytes) else value
                        out[group + ":" + key] = np.asarray(value).tolist()
    return out


def variable_length_strings(path):
    found = []
    with h5py.File(path, "r") as f:
        def visit(name, obj):
            for key in obj.attrs:
                kind = obj.attrs.get_id(key).get_type()
                if isinstance(kind, h5py.h5t.TypeStringID) and kind.is_variable_str():
                    found.append(name + ":" + key)
        visit("/", f)
        f.visititems(visit)
    return found


def upgrade(args, file, directory):
    """fsdp-ckpt upgrade on format 1 copies of fsdp-train's checkpoint (and on args.format_1)."""
    old = os.path.join(args.dir, "format-1.h5")
    shutil.copyfile(file, old)
    make_format_1(old)
    if not variable_length_strings(old):
        fail("the format 1 copy has no variable-length string")
    if variable_length_strings(file):
        fail("%s holds variable-length strings: %s" % (file, variable_length_strings(file)))
    refusal = "as checkpoints of format version 1 did"
    for arguments in (["inspect", old], ["verify", old], ["export", old, old + ".plain"]):
        result = tool(args, arguments, 1)
        if refusal not in result.stderr or "fsdp-ckpt upgrade " + old not in result.stderr:
            fail("fsdp-ckpt %s does not refuse a format 1 file naming fsdp-ckpt upgrade" %
                 arguments[0])

    upgraded = os.path.join(args.dir, "upgraded.h5")
    result = tool(args, ["upgrade", old, upgraded], 0)
    if "trusted checkpoint of format version 1" not in result.stderr:
        fail("fsdp-ckpt upgrade does not say that it trusts the file")
    compare(file, upgraded, exact=True)
    if attributes(upgraded) != attributes(file):
        fail("the upgraded file's attributes differ from the original's:\n%s\n%s" %
             (attributes(upgraded), attributes(file)))
    if variable_length_strings(upgraded):
        fail("the upgraded file holds variable-length strings: %s" %
             variable_length_strings(upgraded))
    tool(args, ["verify", upgraded], 0)
    result = tool(args, ["upgrade", upgraded, old + ".again"], 1)
    if "is already of format version" not in result.stderr or "trusted" in result.stderr:
        fail("fsdp-ckpt upgrade of a current file does not say (only) that it is current")
    if os.path.exists(old + ".again"):
        fail("fsdp-ckpt upgrade of a current file wrote a file")

    # A run resumed from a directory whose latest is of format 1 is refused on every rank, and
    # after an upgrade in place (OLD a directory) it ends where a run resumed from the original
    # ends.
    name = os.path.basename(file)
    original, converted = os.path.join(args.dir, "resume-original"), os.path.join(args.dir,
                                                                                  "resume-upgraded")
    for target in (original, converted):
        shutil.rmtree(target, ignore_errors=True)
        shutil.copytree(directory, target)
    shutil.copyfile(old, os.path.join(converted, name))
    refused = run(args, 2, ["--checkpoint-dir", converted, "--resume"], expect_ok=False)
    if refused.returncode == 0 or refused.stdout.count(refusal) < 1:
        fail("fsdp-train --resume from a format 1 checkpoint was not refused with the message")
    tool(args, ["upgrade", converted, os.path.join(converted, name)], 0)
    run(args, 2, ["--checkpoint-dir", original, "--resume"])
    run(args, 2, ["--checkpoint-dir", converted, "--resume"])
    compare(latest(original), latest(converted), exact=True)

    if args.format_1:
        # A checkpoint an fsdp of format version 1 wrote (fsdp-train, 1 rank, fp32 Adam).
        written = os.path.join(args.dir, "written-by-format-1.h5")
        tool(args, ["upgrade", args.format_1, written], 0)
        compare(args.format_1, written, exact=True)
        if attributes(written) != attributes(args.format_1):
            fail("%s upgraded holds other attributes" % args.format_1)
        tool(args, ["verify", written], 0)


def hdf5_left_open(result):
    """HDF5 prints this at exit when an object of a file was left open on an error path."""
    if "infinite loop closing library" in result.stderr:
        fail("HDF5 found objects left open at exit:\n" + result.stderr[-2000:])


def damaged_readers(args, file, damaged):
    """Nothing damaged is passed on: every reader of a checkpoint refuses a tensor that does not
    match its checksum, naming it and the file, and a checkpoint that lacks tensors its header
    lists, or says it took a negative number of steps."""
    hdf5_left_open(tool(args, ["verify", damaged], 1))
    # The root group's object header damaged: HDF5 cannot open "/", and libhdf5 1.10 leaks what it
    # read; at exit it printed "infinite loop closing library" after the clean error.
    header = os.path.join(args.dir, "damaged-header.h5")
    shutil.copyfile(file, header)
    with h5py.File(header, "r") as f:
        root = h5py.h5o.get_info(f["/"].id).addr
    with open(header, "r+b") as f:
        f.seek(root + 8)
        byte = f.read(1)
        f.seek(root + 8)
        f.write(bytes([byte[0] ^ 0xFF]))
    for arguments in (["verify", header], ["inspect", header]):
        result = tool(args, arguments, 1)
        if "H5Gopen2 failed for group /" not in result.stderr:
            fail("fsdp-ckpt %s of a damaged root group does not say so" % arguments[0])
        hdf5_left_open(result)
    exported = os.path.join(args.dir, "exported-damaged.h5")
    result = tool(args, ["export", damaged, exported], 1)
    if args.tensor not in result.stderr or damaged not in result.stderr:
        fail("export of a damaged checkpoint does not name the damaged tensor and the file")
    hdf5_left_open(result)
    if os.path.exists(exported) or [n for n in os.listdir(args.dir) if n.endswith(".tmp")]:
        fail("export of a damaged checkpoint left a file")
    result = run(args, 2, ["--init-from", damaged, "--stop-after", "1"], expect_ok=False)
    if result.returncode == 0 or args.tensor.split("/")[-1] not in result.stdout or \
            "does not match its data" not in result.stdout:
        fail("fsdp-train --init-from a damaged checkpoint did not refuse it naming the tensor")

    # A checkpoint whose model group was emptied holds none of the tensors its plan lists.
    emptied = os.path.join(args.dir, "emptied.h5")
    shutil.copyfile(file, emptied)
    with h5py.File(emptied, "r+") as f:
        for name in list(f["model"]):
            del f["model"][name]
    for arguments in (["verify", emptied], ["export", emptied, exported]):
        result = tool(args, arguments, 1)
        if "lacks" not in result.stderr or args.tensor not in result.stderr:
            fail("fsdp-ckpt %s of a checkpoint without its model tensors does not name them" %
                 arguments[0])

    # Step -5: not a checkpoint fsdp wrote; --resume and inspect refuse it.
    negative = os.path.join(args.dir, "negative-step")
    shutil.rmtree(negative, ignore_errors=True)
    os.makedirs(negative)
    shutil.copyfile(file, os.path.join(negative, "checkpoint-00000004.h5"))
    with open(os.path.join(negative, "latest"), "w") as f:
        f.write("checkpoint-00000004.h5\n")
    with h5py.File(os.path.join(negative, "checkpoint-00000004.h5"), "r+") as f:
        f.attrs["step"] = np.int64(-5)
    if "has step -5" not in tool(args, ["inspect", negative], 1).stderr:
        fail("inspect of a checkpoint of step -5 does not refuse it")
    result = run(args, 1, ["--checkpoint-dir", negative, "--resume"], expect_ok=False)
    if result.returncode == 0 or "has step -5" not in result.stdout:
        fail("fsdp-train --resume from a checkpoint of step -5 did not refuse it")


def tools(args):
    import json
    shutil.rmtree(args.dir, ignore_errors=True)
    directory = os.path.join(args.dir, "run")
    run(args, 2, ["--checkpoint-dir", directory, "--stop-after", "4"])
    file = latest(directory)
    header = json.loads(tool(args, ["inspect", "--json", file], 0).stdout)
    stored = tensors(file)
    listed = {t["name"]: tuple(t["shape"]) for t in header["tensors"]}
    if listed != {name: value.shape for name, value in stored.items()}:
        fail("inspect --json lists %s; h5py finds %s" %
             (listed, {name: value.shape for name, value in stored.items()}))
    if header["step"] != 4 or header["world_size"] != 2 or header["optimizer"]["name"] != "adam":
        fail("inspect --json: step %s, world size %s, optimizer %s; expected 4, 2, adam" %
             (header["step"], header["world_size"], header["optimizer"]))
    text = tool(args, ["inspect", directory], 0).stdout
    for expected in ("step 4, epoch 0", "optimizer adam after 4 steps", args.tensor):
        if expected not in text:
            fail("inspect does not print '%s'" % expected)
    tool(args, ["verify", directory], 0)
    # HDF5's own tools read it too, as they would any file.
    dump = subprocess.run(["h5dump", "-H", file], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                          text=True, timeout=60)
    if dump.returncode != 0 or 'DATASET "%s"' % args.tensor.split("/")[-1] not in dump.stdout:
        fail("h5dump -H cannot read %s:\n%s" % (file, dump.stdout[-2000:]))

    damaged = os.path.join(args.dir, "damaged.h5")
    shutil.copyfile(file, damaged)
    with h5py.File(damaged, "r") as f:
        offset = f[args.tensor].id.get_offset()
    with open(damaged, "r+b") as f:
        f.seek(offset + 100)
        byte = f.read(1)
        f.seek(offset + 100)
        f.write(bytes([byte[0] ^ 0x01]))
    result = tool(args, ["verify", damaged], 1)
    if args.tensor not in result.stderr or "damaged" not in result.stderr:
        fail("verify of a damaged file does not name the damaged tensor")
    damaged_readers(args, file, damaged)

    plain = os.path.join(args.dir, "plain.h5")
    tool(args, ["export", directory, plain], 0)
    exported = tensors(plain)
    model = {name[len("model/"):]: value for name, value in stored.items()
             if name.startswith("model/")}
    if sorted(exported) != sorted(model) or any(not np.array_equal(exported[n], model[n])
                                                for n in model):
        fail("the exported file does not hold the checkpoint's parameters")

    # A new run starts from the exported parameters (--init-from): with lr 0 its first
    # checkpoint holds exactly them, on another number of ranks.
    # A stray file named as no checkpoint fsdp writes (its step overflows an int64) is left alone
    # by --keep-last (every save failed with "stoll").
    init = os.path.join(args.dir, "init")
    os.makedirs(init)
    stray = os.path.join(init, "checkpoint-99999999999999999999.h5")
    with open(stray, "w") as f:
        f.write("not a checkpoint\n")
    run(args, 3, ["--init-from", plain, "--lr", "0", "--stop-after", "1", "--checkpoint-dir", init,
                  "--keep-last", "2"])
    if not os.path.exists(stray):
        fail("--keep-last removed %s, which is not a checkpoint" % stray)
    started = tensors(latest(init))
    if any(not np.array_equal(started["model/" + n], exported[n]) for n in exported):
        fail("a run with --init-from did not start from the exported parameters")

    upgrade(args, file, directory)

    tool(args, [], 2)
    tool(args, ["inspect"], 2)
    tool(args, ["upgrade", file], 2)
    result = tool(args, ["verify", os.path.join(args.dir, "missing.h5")], 1)
    if "fsdp-ckpt: " not in result.stderr or "missing.h5" not in result.stderr:
        fail("a missing file is not named")
    if "upgrade" not in tool(args, ["--help"], 0).stdout:
        fail("--help does not list the subcommands")


def main():
    if sys.argv[1:2] == ["compare"]:
        parser = argparse.ArgumentParser(description="compare two checkpoints")
        parser.add_argument("mode")
        parser.add_argument("expected")
        parser.add_argument("actual")
        parser.add_argument("--exact", action="store_true")
        args = parser.parse_args()
        paths = [latest(p) if os.path.isdir(p) else p for p in (args.expected, args.actual)]
        compare(paths[0], paths[1], exact=args.exact)
        print("checkpoint_runs: all checks passed", flush=True)
        return
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("mode", choices=["resume", "crash", "tools"])
    parser.add_argument("--ckpt")
    parser.add_argument("--format-1", help="a checkpoint of format version 1, for tools")
    parser.add_argument("--tensor", default="model/layer1.weight",
                        help="a tensor of the model, for tools (the one it damages)")
    parser.add_argument("--mpiexec", required=True)
    parser.add_argument("--train", required=True)
    parser.add_argument("--dir", required=True)
    parser.add_argument("--first", type=int, default=4)
    parser.add_argument("--second", type=int, default=4)
    parser.add_argument("--also", type=int, nargs="*", default=[],
                        help="for resume: uninterrupted runs on these rank counts too")
    parser.add_argument("--ranks", type=int, default=3)
    parser.add_argument("--stop-after", type=int, default=7)
    argv = sys.argv[1:]
    split = argv.index("--") if "--" in argv else len(argv)
    args = parser.parse_args(argv[:split])
    args.train_args = argv[split + 1:]
    {"resume": resume, "crash": crash, "tools": tools}[args.mode](args)
    print("checkpoint_runs: all checks passed", flush=True)


if __name__ == "__main__":
    main()
