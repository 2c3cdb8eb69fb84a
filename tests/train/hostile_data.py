"""Writes data files that must be refused, not trusted: hostile_data.py DIR.

labels_int64_max.h5   a label of 2^63-1 (largest + 1 would overflow)
labels_millions.h5    a label of 8,300,000 (one corrupted byte: millions of classes, GBs of layer)
declares_huge.h5      1.7 KB that declares [2^31, 1024] features (16 TB if allocated)
unwritten_labels.h5   labels in chunks never written (HDF5 would read them as zeros)
half_written.h5       features whose second chunk was never written
external.h5           features in an external raw file
"""
import sys

import h5py
import numpy as np

directory = sys.argv[1]
for name, label in (("labels_int64_max", 2**63 - 1), ("labels_millions", 8_300_000)):
    with h5py.File(f"{directory}/{name}.h5", "w") as f:
        f["features"] = np.zeros((10, 3), "f4")
        labels = np.zeros(10, "i8")
        labels[3] = label
        f["labels"] = labels
with h5py.File(f"{directory}/declares_huge.h5", "w") as f:
    f.create_dataset("features", shape=(2**31, 1024), dtype="f4", chunks=(1, 1024))
    f.create_dataset("labels", shape=(2**31,), dtype="i4", chunks=(1024,))
with h5py.File(f"{directory}/unwritten_labels.h5", "w") as f:
    f["features"] = np.zeros((10, 3), "f4")
    f.create_dataset("labels", shape=(10,), dtype="i4", chunks=(5,))
with h5py.File(f"{directory}/half_written.h5", "w") as f:
    features = f.create_dataset("features", shape=(10, 3), dtype="f4", chunks=(5, 3),
                                compression="gzip")
    features[:5] = np.ones((5, 3), "f4")
    f["labels"] = np.zeros(10, "i4")
np.ones((10, 3), "f4").tofile(f"{directory}/external.raw")
with h5py.File(f"{directory}/external.h5", "w") as f:
    f.create_dataset("features", shape=(10, 3), dtype="f4",
                     external=[(f"{directory}/external.raw", 0, 120)])
    f["labels"] = np.zeros(10, "i4")
print("wrote the hostile data files")
