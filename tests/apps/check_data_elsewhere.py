#!/usr/bin/env python3
"""check_data_elsewhere.py TOOL GPT CONFIG FILE DIR: copies of the checkpoint FILE whose
/model/wpe keeps its values outside the file (HDF5 external storage; a virtual dataset over
another file), each with the right values and checksum: `TOOL verify` must refuse them
(exit 1) and a resume from them must fail (exit 1), naming the dataset, rather than read
another file. Exits 77 (skipped) without h5py."""
import os
import shutil
import subprocess
import sys

try:
    import h5py
except ImportError:
    print("h5py is not available: skipped")
    sys.exit(77)

tool, gpt, config, src, work = sys.argv[1:6]
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


for name, make, says in (("external", external, "keeps its values in 1 external file"),
                         ("virtual", virtual, "is a virtual dataset")):
    path = replace_wpe(name, make)
    with h5py.File(path, "r") as f:  # the copy reads back as the original's values
        with h5py.File(src, "r") as g:
            assert (f["model/wpe"][()] == g["model/wpe"][()]).all(), name
    for what, cmd in (("verify", [tool, "verify", path]),
                      ("resume", [gpt, "--config", config, "--steps", "6", "--resume", path])):
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
print("ok: data kept outside the checkpoint is refused")
