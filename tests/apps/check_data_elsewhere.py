#!/usr/bin/env python3
"""check_data_elsewhere.py TOOL GPT CONFIG FILE DIR [MPIEXEC...]: copies of the checkpoint FILE
whose /model/wpe keeps its values outside the file (HDF5 external storage; a virtual dataset
over another file), each with the right values and checksum, or never wrote them (a dataset
made without its data; a chunked one missing a chunk, whose checksum matches the fill values
it reads as): `TOOL verify` must refuse them (exit 1) and a resume from them must fail
(exit 1), naming the dataset, rather than read another file or fill values; with MPIEXEC
(the launcher and its rank-count flag) the resume also runs at 2 ranks under --zero 3, where
the collective read of unwritten values left the ranks waiting for each other. Exits 77
(skipped) without h5py."""
import os
import shutil
import subprocess
import sys

try:
    import h5py
    import numpy as np
except ImportError:
    print("h5py is not available: skipped")
    sys.exit(77)
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from check_checkpoint import checksum  # noqa: E402 (dtrain's documented checksum, in NumPy)

tool, gpt, config, src, work = sys.argv[1:6]
launcher = sys.argv[6:]
shutil.rmtree(work, ignore_errors=True)
os.makedirs(work)
failures = []


def replace_wpe(name, make):
    path = os.path.join(work, name + ".h5")
    shutil.copy(src, path)
    with h5py.File(path, "r+") as f:
        values, checksum = f["model/wpe"][()], f["model/wpe"].attrs["checksum"]
        del f["model/wpe"]
        make(f, values)
        f["model/wpe"].attrs["checksum"] = checksum
    return path


def external(f, values):
    raw = os.path.join(work, "wpe.raw")
    values.astype("<f4").tofile(raw)
    f.create_dataset("model/wpe", shape=values.shape, dtype="<f4", external=[(raw, 0, values.nbytes)])


def virtual(f, values):
    other = os.path.join(work, "other.h5")
    with h5py.File(other, "w") as g:
        g["wpe"] = values
    layout = h5py.VirtualLayout(shape=values.shape, dtype="<f4")
    layout[...] = h5py.VirtualSource(other, "wpe", shape=values.shape)
    f.create_virtual_dataset("model/wpe", layout)


def unwritten(f, values):
    f.create_dataset("model/wpe", shape=values.shape, dtype="<f4")


def chunk_missing(f, values):
    d = f.create_dataset("model/wpe", shape=values.shape, dtype="<f4", chunks=(1, values.shape[1]))
    d[0] = 0  # the first chunk only; the others read as the fill value, 0


cases = (("external", external, "keeps its values in 1 external file", True),
         ("virtual", virtual, "is a virtual dataset", True),
         ("unwritten", unwritten, "holds fewer values than its shape (its values were never written)", False),
         ("chunk_missing", chunk_missing, "holds fewer values than its shape (15 of its 16 chunks were never written)",
          False))
for name, make, says, same_values in cases:
    path = replace_wpe(name, make)
    with h5py.File(path, "r+") as f:
        if same_values:  # the copy reads back as the original's values
            with h5py.File(src, "r") as g:
                assert (f["model/wpe"][()] == g["model/wpe"][()]).all(), name
        else:  # its checksum made to match the fill values it reads as
            f["model/wpe"].attrs["checksum"] = np.uint64(checksum(f["model/wpe"][()]))
    runs = [("verify", [tool, "verify", path]),
            ("resume", [gpt, "--config", config, "--steps", "6", "--resume", path])]
    if launcher and not same_values:
        runs.append(("resume at 2 ranks, zero 3",
                     launcher + ["2", gpt, "--config", config, "--steps", "6", "--zero", "3", "--resume", path]))
    for what, cmd in runs:
        r = subprocess.run(cmd, capture_output=True, text=True, timeout=60)
        out = r.stdout + r.stderr
        if r.returncode != 1 or "dataset /model/wpe " + says not in out:
            failures.append(f"{what} of the {name} copy: exit {r.returncode}, expected 1 with "
                            f"'dataset /model/wpe {says}':\n{out[-800:]}")
        else:
            print(f"{what} refused the {name} copy: {says}")

if failures:
    print("FAIL:\n" + "\n".join(failures))
    sys.exit(1)
print("ok: data kept outside the checkpoint, or never written, is refused")
