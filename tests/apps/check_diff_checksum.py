#!/usr/bin/env python3
"""check_diff_checksum.py TOOL FILE DIR: a copy of the checkpoint FILE whose /model/wpe holds
the same values under another `checksum` attribute (a copy `verify` refuses): `TOOL diff` must
call the two files different (exit 1) and name the attribute, where it used to call them
identical. Exits 77 (skipped) without h5py."""
import os
import shutil
import subprocess
import sys

try:
    import h5py
    import numpy
except ImportError:
    print("h5py is not available: skipped")
    sys.exit(77)

tool, src, work = sys.argv[1:4]
shutil.rmtree(work, ignore_errors=True)
os.makedirs(work)
copy = os.path.join(work, "other_checksum.h5")
shutil.copy(src, copy)
with h5py.File(copy, "r+") as f:
    stored = int(f["model/wpe"].attrs["checksum"])
    del f["model/wpe"].attrs["checksum"]
    f["model/wpe"].attrs["checksum"] = numpy.uint64(12345)
r = subprocess.run([tool, "diff", src, copy], capture_output=True, text=True, timeout=60)
out = r.stdout + r.stderr
print(out)
want = f"attribute /model/wpe checksum"
line = [l for l in out.splitlines() if l.startswith(want)]
if r.returncode != 1 or not line or not line[0].endswith(f"{stored} -> 12345") or not out.splitlines()[-1].startswith("differ"):
    print(f"FAIL: exit {r.returncode}, expected 1 with '{want} ... {stored} -> 12345' and 'differ'")
    sys.exit(1)
print("ok: a dataset's other checksum makes the files differ")
