#!/usr/bin/env python3
"""Runs the h5py reader shown in docs/checkpoints.md, as printed there, on a checkpoint, and
checks what it prints: a checkpoint must read as plain arrays with no knowledge of fsdp.

  doc_reader.py <docs/checkpoints.md> <checkpoint file> <expected line>...
"""
import subprocess
import sys
import tempfile


def main():
    doc, checkpoint, expected = sys.argv[1], sys.argv[2], sys.argv[3:]
    text = open(doc).read()
    start = text.index("```python\n", text.index("## Reading one with h5py")) + len("```python\n")
    reader = text[start:text.index("```", start)]
    lines = [line for line in reader.splitlines() if line.strip()]
    if len(lines) > 5:
        sys.exit("doc_reader: the reader in %s has %d lines; the docs promise five" %
                 (doc, len(lines)))
    with tempfile.NamedTemporaryFile("w", suffix=".py") as script:
        script.write(reader)
        script.flush()
        result = subprocess.run([sys.executable, script.name, checkpoint], stdout=subprocess.PIPE,
                                stderr=subprocess.STDOUT, text=True, timeout=120)
    print(result.stdout)
    if result.returncode != 0:
        sys.exit("doc_reader: the reader failed with exit code %d" % result.returncode)
    missing = [line for line in expected if line not in result.stdout.splitlines()]
    if missing:
        sys.exit("doc_reader: the reader did not print %s" % missing)
    print("doc_reader: all checks passed")


if __name__ == "__main__":
    main()
