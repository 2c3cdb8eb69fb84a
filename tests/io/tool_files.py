#!/usr/bin/env python3
"""What every tool's inputs and outputs can rely on (docs/reliability.md, "Files"), driven as a user
would:

  tool_files.py --ckpt C --solve S --plan P --train T --dir D

- an output that names one of the tool's own inputs (the same inode: the same name, another
  name, a link) is a usage error (exit 2) and the input is left as it was: fsdp-ckpt export
  OUTPUT over CHECKPOINT, fsdp-solve --write-graph and --emit-plan over --graph, fsdp-plan
  --output over --model and --plan;
- an output that is a symbolic link writes the file the link ends at; the link stays a link;
- an output that is a FIFO, a directory or a character device (made here with mknod, as root
  only) is refused (exit 1) and left as it is: nothing replaces it with a file;
- a new output gets the mode the umask gives (027 here: 0640; a checkpoint directory 0750), a
  replaced one keeps its own mode;
- an input that is a FIFO (fsdp-train --data, --init-from, a checkpoint directory's "latest",
  fsdp-ckpt verify and inspect, fsdp-plan --model, fsdp-solve --graph) is refused at once
  instead of blocking forever.
Exits 0 when everything holds, 1 with a message otherwise.
"""
import argparse
import hashlib
import os
import shutil
import stat
import subprocess
import sys

UMASK = 0o027
# A refused FIFO answers at once; a tool that opens it waits for a writer forever.
TIMEOUT_S = 120


def fail(message):
    print("tool_files: FAIL: " + message, flush=True)
    sys.exit(1)


def run(command, expect, text=None):
    """Runs command under UMASK; fails unless it exits with expect and prints text."""
    print("$ " + " ".join(command), flush=True)
    try:
        result = subprocess.run(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                text=True, timeout=TIMEOUT_S, preexec_fn=lambda: os.umask(UMASK))
    except subprocess.TimeoutExpired:
        fail("still running after %d s (blocked on an input?): %s" %
             (TIMEOUT_S, " ".join(command)))
    print(result.stdout, flush=True)
    if result.returncode != expect:
        fail("exit code %d, expected %d, from: %s" % (result.returncode, expect, " ".join(command)))
    if text is not None and text not in result.stdout:
        fail("'%s' is not in the output of: %s" % (text, " ".join(command)))
    return result.stdout


def digest(path):
    with open(path, "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()


def mode_of(path):
    return stat.S_IMODE(os.stat(path).st_mode)


def expect_mode(path, mode):
    if mode_of(path) != mode:
        fail("%s has mode %o, expected %o" % (path, mode_of(path), mode))


def same_file_refused(command, output, input_, output_what, input_what):
    """command writes output, which names input: exit 2, input unchanged."""
    before = digest(input_)
    run(command, 2, "%s '%s' is the same file as %s '%s', which writing it would replace" %
        (output_what, output, input_what, input_))
    if digest(input_) != before:
        fail("%s changed although the command was refused" % input_)


def special_files(directory):
    """A FIFO, a directory and, as root, a character device of its own (1, 7: what /dev/full
    is), each with the test that it is still what it was. Named .json, as fsdp-plan's outputs
    must be."""
    fifo = os.path.join(directory, "fifo.json")
    os.mkfifo(fifo)
    folder = os.path.join(directory, "folder.json")
    os.mkdir(folder)
    found = [(fifo, "a FIFO", stat.S_ISFIFO), (folder, "a directory", stat.S_ISDIR)]
    device = os.path.join(directory, "full.json")
    try:
        os.mknod(device, 0o600 | stat.S_IFCHR, os.makedev(1, 7))
        found.append((device, "a character device", stat.S_ISCHR))
    except PermissionError:
        print("tool_files: not root: no device node of its own, the device case is skipped")
    return found


def outputs_refused(command, specials):
    """command + [path] for every special file: exit 1 naming its kind, the file unchanged."""
    for path, kind, still in specials:
        run(command + [path], 1, "cannot write '%s': it is %s, not a regular file" % (path, kind))
        if not still(os.lstat(path).st_mode):
            fail("%s is no longer %s" % (path, kind))


def main():
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    for tool in ("ckpt", "solve", "plan", "train"):
        parser.add_argument("--" + tool, required=True)
    parser.add_argument("--dir", required=True)
    args = parser.parse_args()
    shutil.rmtree(args.dir, ignore_errors=True)
    os.makedirs(args.dir)
    d = args.dir
    specials = special_files(d)
    fifo = specials[0][0]
    fifo_refused = "'%s' is a FIFO, not a regular file; give the path of a regular file" % fifo

    # fsdp-train: a checkpoint directory, its checkpoint and "latest" with the umask's modes.
    run_dir = os.path.join(d, "run")
    train = [args.train, "--samples", "256", "--epochs", "1", "--batch-size", "32"]
    run(train + ["--checkpoint-dir", run_dir], 0)
    with open(os.path.join(run_dir, "latest")) as f:
        checkpoint = os.path.join(run_dir, f.read().strip())
    expect_mode(run_dir, 0o750)
    expect_mode(checkpoint, 0o640)
    expect_mode(os.path.join(run_dir, "latest"), 0o640)
    data = os.path.join(d, "data.h5")
    run(train + ["--write-data", data], 0)
    expect_mode(data, 0o640)
    outputs_refused(train + ["--write-data"], specials)
    run([args.train, "--epochs", "1", "--data", fifo], 1, "data file " + fifo_refused)
    run(train + ["--init-from", fifo], 1, "HDF5 file " + fifo_refused)
    pointing = os.path.join(d, "pointing")
    os.mkdir(pointing)
    latest_fifo = os.path.join(pointing, "latest")
    os.mkfifo(latest_fifo)
    run(train + ["--checkpoint-dir", pointing, "--resume"], 1,
        "checkpoint pointer '%s' is a FIFO, not a regular file" % latest_fifo)

    # fsdp-ckpt: export never over its checkpoint, through links, into regular files only.
    ckpt = args.ckpt
    same_file_refused([ckpt, "export", checkpoint, checkpoint], checkpoint, checkpoint, "OUTPUT",
                      "CHECKPOINT")
    alias = os.path.join(d, "alias.h5")
    os.symlink(os.path.relpath(checkpoint, d), alias)
    same_file_refused([ckpt, "export", run_dir, alias], alias, checkpoint, "OUTPUT", "CHECKPOINT")
    run([ckpt, "verify", checkpoint], 0, "every checksum matches")
    exports = os.path.join(d, "exports")
    os.mkdir(exports)
    link = os.path.join(d, "export-link.h5")
    os.symlink("exports/plain.h5", link)  # dangling: the export creates its target
    run([ckpt, "export", checkpoint, link], 0)
    plain = os.path.join(exports, "plain.h5")
    if not os.path.islink(link) or not os.path.isfile(plain):
        fail("export through a link replaced the link instead of writing %s" % plain)
    expect_mode(plain, 0o640)
    os.chmod(plain, 0o604)
    run([ckpt, "export", checkpoint, link], 0)
    expect_mode(plain, 0o604)
    outputs_refused([ckpt, "export", checkpoint], specials)
    run([ckpt, "verify", fifo], 1, "checkpoint " + fifo_refused)
    run([ckpt, "inspect", fifo], 1, "checkpoint " + fifo_refused)

    # fsdp-solve: --write-graph and --emit-plan never over --graph.
    solve = args.solve
    graph = os.path.join(d, "graph.json")
    run([solve, "--generate", "mlp", "--write-graph", graph], 0)
    expect_mode(graph, 0o640)
    dotted = os.path.join(d, ".", "graph.json")
    same_file_refused([solve, "--graph", graph, "--write-graph", dotted], dotted, graph,
                      "--write-graph", "--graph")
    hard = os.path.join(d, "graph-hard.json")
    os.link(graph, hard)
    same_file_refused([solve, "--graph", graph, "--emit-plan", hard], hard, graph, "--emit-plan",
                      "--graph")
    outputs_refused([solve, "--generate", "mlp", "--write-graph"], specials)
    run([solve, "--graph", fifo], 1, "graph file " + fifo_refused)

    # fsdp-plan: --output never over --model or --plan.
    plan = args.plan
    model = os.path.join(d, "model.json")
    with open(model, "w") as f:
        f.write('{"parameters": [{"name": "w", "shape": [8, 4], "layer": "l0"}]}\n')
    same_file_refused([plan, "--model", model, "-n", "2", "--output", model], model, model,
                      "--output", "--model")
    saved = os.path.join(d, "plan.json")
    run([plan, "--model", model, "-n", "2", "--output", saved], 0)
    expect_mode(saved, 0o640)
    plan_link = os.path.join(d, "plan-link.json")
    os.symlink("plan.json", plan_link)
    same_file_refused([plan, "--plan", saved, "--output", plan_link], plan_link, saved, "--output",
                      "--plan")
    outputs_refused([plan, "--model", model, "-n", "2", "--output"], specials)
    run([plan, "--model", fifo, "-n", "2"], 1, "model description " + fifo_refused)
    print("tool_files: all checks passed", flush=True)


if __name__ == "__main__":
    main()
