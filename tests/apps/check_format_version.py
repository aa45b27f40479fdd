#!/usr/bin/env python3
"""`dtrain-ckpt verify` on copies of a checkpoint whose format_version h5py rewrote: the
supported version passes; another number, a fraction, a negative, a huge value or text
fails with status 1 and one FAILED line naming the version (never a parse error), as does
the supported number stored as text or as a float (a resume refuses those too). `export`
refuses each failing copy with status 2 and writes nothing.

usage: check_format_version.py TOOL FILE SCRATCH   (exit 77 = skipped: no h5py)
"""
import os
import shutil
import subprocess
import sys

try:
    import h5py
    import numpy as np
except ImportError:
    print("h5py/numpy not available: skipped")
    sys.exit(77)

tool, source, scratch = sys.argv[1:4]
cases = [(np.int64(1), 0), (np.int64(2), 1), (np.float64(1.5), 1), (np.int64(-5), 1),
         (np.uint64(2**64 - 1), 1), (np.bytes_(b"abc"), 1), (np.bytes_(b"9" * 23), 1),
         (np.bytes_(b"1"), 1), (np.float64(1.0), 1)]
failed = False
for value, want in cases:
    shutil.copyfile(source, scratch)
    with h5py.File(scratch, "r+") as f:
        del f.attrs["format_version"]
        f.attrs["format_version"] = value
    run = subprocess.run([tool, "verify", scratch], capture_output=True, text=True)
    out = (run.stdout + run.stderr).strip()
    ok = run.returncode == want and (want == 0 or (len(out.splitlines()) == 1 and
                                                   ("format version" in out or "format_version" in out)))
    print(("ok  " if ok else "FAIL"), repr(value), "->", run.returncode, out)
    failed |= not ok
    exported = scratch + ".safetensors"
    if os.path.exists(exported):
        os.remove(exported)
    run = subprocess.run([tool, "export", scratch, exported], capture_output=True, text=True)
    written = os.path.exists(exported)
    ok = (run.returncode == 0 and written) if want == 0 else (run.returncode == 2 and not written)
    print(("ok  " if ok else "FAIL"), repr(value), "export ->", run.returncode, (run.stdout + run.stderr).strip())
    failed |= not ok
sys.exit(1 if failed else 0)
