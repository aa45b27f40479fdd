#!/usr/bin/env python3
"""check_data.py MPIEXEC NPFLAG DATA GPT WORKDIR: dtrain-data against an independent reference.

A small byte-level BPE is trained on a sample and written as Hugging Face writes GPT-2's. Input
files mix prose, code, contractions, runs of spaces and newlines, digits, accented, Cyrillic and
CJK letters, emoji, bytes that are not UTF-8, CRLF line ends, lines of CJK and Cyrillic text
only, white space of several bytes after line breaks, a file without a newline and an empty
file. `dtrain-data encode` at 1, 2, 3 and 4 ranks, with small read blocks (and at 17, 29 and
61 bytes) so that the ranks' shares and the blocks are cut inside the files, must write exactly the tokens of GPT-2's encoding
(`bpe_files.encode`: its pattern applied by the `regex` module, byte pair merges by rank) with
<|endoftext|> before each non-empty file, and as many tokens a shard as --shard-tokens asks.
`decode` must give the files' bytes back, dtrain-gpt must train on the shards, and refused
commands must exit with one message and leave no file. Exits 77 (skipped) where the `regex`
module is missing."""
import os
import shutil
import struct
import subprocess
import sys

try:
    import regex  # noqa: F401 (bpe_files needs it)
except ImportError:
    print("the regex module is not available: skipped")
    sys.exit(77)

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bpe_files import EOT, encode, train, write_hf  # noqa: E402

mpiexec, npflag, data, gpt, work = sys.argv[1:6]
shutil.rmtree(work, ignore_errors=True)
os.makedirs(work)
failures = []

prose = ("It's the world's end, they'll say; we're here.\nOld  text\twith   spaces \n\n\nNumbers 1234567 "
         "and 3.14!\nÜber café naïve Москва 東京都 🙂 x² ½\n  indented line\n\tint main() { return 0; }\n"
         "#define X(a) ((a)+1)\nEND\n")
texts = {
    "a.txt": "".join(f"Paragraph {i}: {prose}" for i in range(60)).encode(),
    "b.txt": ("One line without a newline, " * 40).encode() + b"\xff\xfe bytes that are not UTF-8 \xc3",
    "empty.txt": b"",
    "c.txt": ("\n".join(f"row {i} 'quoted' It'S x\u00a0y\u0085z \x1c w" for i in range(200)) + "\n").encode(),
    "d.txt": "".join(f"CRLF line {i}, end.\r\n" + ("  \r\n" if i % 7 == 0 else "") for i in range(300)).encode(),
    "e.txt": "".join(f"東京都の{i}番目の行です。\nМосква {i}\u3000строка\n" for i in range(150)).encode(),
    # White space of two and three bytes right after line breaks, which a block may end inside.
    "f.txt": "".join(f"Paragraph {i}.\n\n\u00a0Para two.\nx\n\u00a0\u00a0b\r\n\u3000c\n" for i in range(80)).encode(),
}
for name, body in texts.items():
    with open(os.path.join(work, name), "wb") as f:
        f.write(body)
inputs = [os.path.join(work, n) for n in texts]

sample = (prose * 3 + texts["c.txt"][:2000].decode() + " ".join(["One line without a newline,"] * 5)
          + texts["d.txt"][:500].decode() + texts["e.txt"][:1000].decode(errors="ignore") + texts["f.txt"][:400].decode())
pieces, merges = train(sample, 300)
pieces.append(EOT)
ids = {p: i for i, p in enumerate(pieces)}
ranks = {pair: r for r, pair in enumerate(merges)}
tok = os.path.join(work, "tok")
write_hf(tok, pieces, merges)
eot = ids[EOT]
want = []
for body in texts.values():
    if body:
        want += [eot] + encode(body.decode("utf-8", "surrogateescape"), ranks, ids)


def run(args, ranks_n=1, env_extra=None, expect=0):
    env = dict(os.environ, DTRAIN_DATA_BLOCK_BYTES="700")
    env.update(env_extra or {})
    r = subprocess.run([mpiexec, npflag, str(ranks_n)] + args, capture_output=True, stdin=subprocess.DEVNULL,
                       timeout=120, env=env)
    if r.returncode != expect:
        sys.exit(f"FAIL: {args} at {ranks_n} ranks exited {r.returncode}, expected {expect}:\n"
                 f"{r.stdout.decode(errors='replace')[-2000:]}{r.stderr.decode(errors='replace')[-2000:]}")
    return r.stdout, r.stderr.decode(errors="replace")


def read_shard(path):
    with open(path, "rb") as f:
        head = struct.unpack("<256i", f.read(1024))
        body = f.read()
    if head[:2] != (20240520, 1) or len(body) != 2 * head[2]:
        failures.append(f"{path}: header {head[:3]} for {len(body)} bytes of tokens")
    return list(struct.unpack(f"<{len(body) // 2}H", body))


def leftovers():
    return sorted(n for n in os.listdir(work) if n.endswith(".bin") or n.endswith(".partial") or "spill" in n)


# One file, at 1-4 ranks, with blocks of other sizes, and with ranks that keep only some of
# their tokens in memory (DTRAIN_DATA_MEMORY_BYTES: the rest spilled to a file and read back
# in pieces): the reference's tokens.
for n, block, memory in ((1, 700, None), (2, 700, None), (3, 700, None), (4, 700, None), (2, 17, None),
                         (2, 29, 64), (1, 61, 2), (3, 700, 5000)):
    out = os.path.join(work, f"all{n}.bin" if block == 700 and not memory else f"all{n}_{block}_{memory}.bin")
    env = {"DTRAIN_DATA_BLOCK_BYTES": str(block)}
    if memory:
        env["DTRAIN_DATA_MEMORY_BYTES"] = str(memory)
    log, _ = run([data, "encode", "--tokenizer", tok, "--output", out] + inputs, n, env_extra=env)
    got = read_shard(out)
    what = f"{n} ranks, {block}-byte blocks" + (f", {memory} bytes of tokens in memory" if memory else "")
    if got != want:
        first = next((i for i, (g, w) in enumerate(zip(got, want)) if g != w), min(len(got), len(want)))
        failures.append(f"{what}: {len(got)} tokens, the reference {len(want)}; first difference at {first}")
    else:
        print(f"{what}: {len(got)} tokens as the reference encodes the {len(inputs)} files")

# Shards of 500 tokens at 3 ranks (a glob pattern for the inputs), read back as one stream.
out = os.path.join(work, "sharded.bin")
log, _ = run([data, "encode", "--tokenizer", tok, "--output", out, "--shard-tokens", "500",
              os.path.join(work, "[a-f].txt"), inputs[2]], 3, env_extra={"DTRAIN_DATA_MEMORY_BYTES": "300"})
names = sorted(n for n in os.listdir(work) if n.startswith("sharded_"))
shards = [read_shard(os.path.join(work, n)) for n in names]
sizes = [len(s) for s in shards]
if sum(shards, []) != want or names[0] != "sharded_000000.bin" or any(s != 500 for s in sizes[:-1]) or not 0 < sizes[-1] <= 500:
    failures.append(f"--shard-tokens 500: shards {names} of {sizes} tokens, {len(want)} expected in total")
else:
    print(f"--shard-tokens 500 at 3 ranks: {len(names)} shards ({sizes[-1]} tokens in the last) holding the same tokens")

# --no-eot, and decode giving the files' bytes back (with <|endoftext|> before each).
out = os.path.join(work, "noeot.bin")
run([data, "encode", "--tokenizer", tok, "--output", out, "--no-eot"] + inputs, 2)
if read_shard(out) != [t for t in want if t != eot]:
    failures.append("--no-eot: not the tokens without <|endoftext|>")
# --no-eot given to one rank only: refused by every rank (status 2), nothing written.
mixed = os.path.join(work, "mixed.bin")
_, log = run([data, "encode", "--tokenizer", tok, "--output", mixed] + inputs +
             [":", npflag, "1", data, "encode", "--tokenizer", tok, "--output", mixed, "--no-eot"] + inputs, 1,
             expect=2)
if log.count("--no-eot is '1' on rank 1, '0' on rank 0") != 1 or os.path.exists(mixed):
    failures.append(f"--no-eot on one rank: not refused once, or {mixed} written:\n{log}")
# decode under a launcher runs on its first rank only
text3, _ = run([data, "decode", "--tokenizer", tok, os.path.join(work, "all2.bin")], 3)
if text3 != b"".join(EOT + b for b in texts.values() if b):
    failures.append("decode at 3 ranks: not the files' bytes once")
text, _ = run([data, "decode", "--tokenizer", tok, os.path.join(work, "all2.bin")])
if text != b"".join(EOT + b for b in texts.values() if b):
    failures.append("decode --tokenizer: not the files' bytes")
ids_text, _ = run([data, "decode", "--first", "3", "--count", "4", os.path.join(work, "all2.bin")])
if ids_text.split() != [str(t).encode() for t in want[3:7]]:
    failures.append(f"decode --first 3 --count 4 printed {ids_text!r}, expected {want[3:7]}")

# dtrain-gpt trains on the shards.
_, log = run([gpt, "--data", os.path.join(work, "sharded_*.bin"), "--vocab", str(len(pieces)), "--layers", "1",
              "--d-model", "32", "--heads", "2", "--seq-len", "32", "--micro-batch", "2", "--steps", "3",
              "--eval-every", "0", "--log-every", "1"], 2)
if "step 3/3" not in log or "data: " not in log:
    failures.append(f"dtrain-gpt on the shards: no 'step 3/3' in its log:\n{log[-1500:]}")
else:
    print("dtrain-gpt trained 3 steps on the shards")

# Refusals: one message, exit status, and no file left behind.
dangling = os.path.join(work, "dangling.bin")  # a link to nothing is a name in use too
if not os.path.lexists(dangling):
    os.symlink("nowhere", dangling)
version_2 = os.path.join(work, "version_2.bin")  # all1.bin with another version in its header
with open(os.path.join(work, "all1.bin"), "rb") as f:
    shard = bytearray(f.read())
shard[4:8] = (2).to_bytes(4, "little")
with open(version_2, "wb") as f:
    f.write(shard)
fifo = os.path.join(work, "shard.fifo")  # decode read it until a writer closed it: for ever
if not os.path.exists(fifo):
    os.mkfifo(fifo)
before = leftovers()
refusals = [
    ([data, "encode", "--tokenizer", tok, "--output", os.path.join(work, "all1.bin")] + inputs, 2, "exists"),
    ([data, "encode", "--tokenizer", tok, "--output", dangling] + inputs, 2, "exists"),
    ([data, "encode", "--tokenizer", tok, "--output", out.replace("noeot", "sharded"), "--shard-tokens", "9"] + inputs,
     2, "a shard of that name exists"),
    ([data, "encode", "--tokenizer", tok, "--output", os.path.join(work, "x.txt")] + inputs, 2, "must name a .bin file"),
    ([data, "encode", "--tokenizer", tok, "--output", os.path.join(work, "x.bin"), os.path.join(work, "missing.txt")],
     1, "cannot open"),
    ([data, "encode", "--tokenizer", tok, "--output", os.path.join(work, "x.bin"), inputs[2]], 2, "hold no text"),
    ([data, "encode", "--tokenizer", tok, "--output", os.path.join(work, "x.bin"), work], 1, "not a readable regular file"),
    ([data, "encode", "--tokenizer", tok, "--output", os.path.join(work, "no_dir", "x.bin")] + inputs, 1, "no directory"),
    ([data, "encode", "--tokenizer", os.path.join(work, "missing_tok"), "--output", os.path.join(work, "x.bin")] + inputs,
     1, "no such file"),
    ([data, "encode", "--output", os.path.join(work, "x.bin")] + inputs, 2, "needs --tokenizer"),
    ([data, "encode", "--tokenizer", tok, "--output", os.path.join(work, "x.bin"), "--shard-tokens", "0"] + inputs,
     2, "at least 1"),
    ([data, "decode", inputs[0]], 1, "not a token shard"),
    ([data, "decode", version_2], 1, "is a token shard of version 2, which this dtrain-data does not read"),
    ([data, "decode", work], 2, "is a directory, not a token shard"),
    ([data, "decode", fifo], 2, "is not a regular file (a FIFO, device or socket), not a token shard"),
    ([data, "decode", os.path.join(work, "missing.bin")], 1, "missing.bin': No such file or directory"),
    ([data, "decode", "--first", "99999", os.path.join(work, "all1.bin")], 2, "past the shard"),
    ([data, "decode", "--first", "9" * 20, os.path.join(work, "all1.bin")], 2, "--first " + "9" * 20 + " is too large"),
    ([data, "decode", "--count", "1", "--count", "2", os.path.join(work, "all1.bin")], 2,
     "option '--count' is given more than once"),
    ([data, "encode", "--tokenizer", tok, "--no-eot", "--no-eot", "--output", os.path.join(work, "x.bin")] + inputs,
     2, "option '--no-eot' is given more than once"),
]
for args, code, message in refusals:
    for n in (1, 2):
        if args[1] == "decode" and n == 2:
            continue
        _, err = run(args, n, expect=code)
        lines = [l for l in err.splitlines() if "dtrain-data" in l]
        if len(lines) != 1 or message not in lines[0]:
            failures.append(f"{args[1:]} at {n} ranks: {err!r} (expected one line with {message!r})")
# A malformed setting is refused before the tokenizer is read (here: a missing one).
for n in (1, 2):
    _, err = run([data, "encode", "--tokenizer", os.path.join(work, "missing_tok"), "--output",
                  os.path.join(work, "x.bin")] + inputs, n, env_extra={"DTRAIN_DATA_BLOCK_BYTES": "abc"}, expect=2)
    lines = [l for l in err.splitlines() if "dtrain-data" in l]
    if len(lines) != 1 or "DTRAIN_DATA_BLOCK_BYTES='abc' is not an integer" not in lines[0]:
        failures.append(f"a malformed DTRAIN_DATA_BLOCK_BYTES at {n} ranks: {err!r}")
# Ranks given another command or other options (an MPMD job): every rank stops, one message
# naming the rank, where encode's ranks waited for ever for one given decode, and a mistake
# on rank 1 only printed nothing.
encode_args = [data, "encode", "--tokenizer", tok, "--output", os.path.join(work, "x.bin")] + inputs
for other, message in (([data, "decode", os.path.join(work, "all1.bin")], "--command is 'decode' on rank 1, 'encode' on rank 0"),
                       (encode_args + ["--bogus"], "reading the options failed on world rank 1: unknown option '--bogus'")):
    r = subprocess.run([mpiexec, npflag, "1"] + encode_args + [":", npflag, "1"] + other, capture_output=True,
                       stdin=subprocess.DEVNULL, timeout=120)
    lines = [l for l in r.stderr.decode(errors="replace").splitlines() if "dtrain-data" in l]
    if r.returncode != 2 or len(lines) != 1 or message not in lines[0]:
        failures.append(f"encode on rank 0, {other[1:]} on rank 1: exit {r.returncode}, {lines!r} (expected {message!r})")
# Standard output that cannot be written (a full disk) is an error, not text lost in silence.
with open("/dev/full", "wb") as full:
    r = subprocess.run([data, "decode", os.path.join(work, "all1.bin")], stdout=full, stderr=subprocess.PIPE, timeout=60)
if r.returncode != 1 or b"writing standard output failed: No space left on device" not in r.stderr:
    failures.append(f"decode > /dev/full: exit {r.returncode}, {r.stderr!r}")
if leftovers() != before:
    failures.append(f"refused commands left files: {sorted(set(leftovers()) - set(before))}")
print(f"{len(refusals)} refusals, each one message at 1 and 2 ranks, no file left")

if failures:
    sys.exit("FAIL:\n" + "\n".join(failures))
print("ok: dtrain-data encodes as GPT-2's encoder")
