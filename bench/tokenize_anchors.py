#!/usr/bin/env python3
"""tokenize_anchors.py DTRAIN_DATA TOKENIZER_DIR TEXT [RANKS...]: dtrain-data encode's speed
against Hugging Face `tokenizers` and tiktoken on the same text, with the same BPE
(TOKENIZER_DIR/vocab.json and merges.txt), in one run; each one's tokens are compared with
dtrain's. The anchors are skipped where their modules are missing (pip install tokenizers
tiktoken). dtrain-data runs under `mpiexec -n R` for each R in RANKS (default 1 2); its
figure is the time it reports for encoding (reading included), the anchors' the time of
their encode calls on the text held in memory (one thread). The text must be UTF-8."""
import json
import os
import re
import struct
import subprocess
import sys
import tempfile
import time

data, tok_dir, text_path = sys.argv[1:4]
ranks = [int(r) for r in sys.argv[4:]] or [1, 2]
with open(text_path, "rb") as f:
    raw = f.read()
mb = len(raw) / 1e6
print(f"{text_path}: {len(raw)} bytes")


def shard_tokens(path):
    with open(path, "rb") as f:
        count = struct.unpack("<3i", f.read(12))[2]
        f.seek(1024)
        return list(struct.unpack(f"<{count}H", f.read(2 * count)))


reference = None
with tempfile.TemporaryDirectory() as work:
    for r in ranks:
        out = os.path.join(work, f"r{r}.bin")
        log = subprocess.run(["mpiexec", "-n", str(r), data, "encode", "--no-eot", "--tokenizer", tok_dir,
                              "--output", out, text_path], check=True, capture_output=True, text=True).stdout
        seconds = float(re.search(r"encoded in ([0-9.]+) s", log).group(1))
        tokens = shard_tokens(out)
        same = "" if reference is None else (", the same tokens" if tokens == reference else ", OTHER TOKENS")
        reference = reference or tokens
        print(f"dtrain-data, {r} rank{'s' if r > 1 else ''}: {mb / seconds:.1f} MB/s ({len(tokens)} tokens{same})")

text = raw.decode("utf-8")  # the anchors take Unicode text: a file that is not UTF-8 is refused here
os.environ["TOKENIZERS_PARALLELISM"] = "false"
try:
    from tokenizers import Tokenizer, models, pre_tokenizers
    hf = Tokenizer(models.BPE.from_file(os.path.join(tok_dir, "vocab.json"), os.path.join(tok_dir, "merges.txt")))
    hf.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    # One long string is its slowest case: it is given the text's lines in pieces cut where
    # the tokens do not change (a newline between printable ASCII and a letter or digit).
    pieces = re.split(r"(?<=[!-~]\n)(?=[A-Za-z0-9])", text)
    start = time.perf_counter()
    ids = [t for e in hf.encode_batch(pieces) for t in e.ids]
    seconds = time.perf_counter() - start
    print(f"Hugging Face tokenizers, 1 thread, {len(pieces)} pieces: {mb / seconds:.1f} MB/s "
          f"({'the same tokens' if ids == reference else 'other tokens'})")
except ImportError:
    print("Hugging Face tokenizers: not installed")

try:
    import tiktoken
    with open(os.path.join(tok_dir, "vocab.json"), encoding="utf-8") as f:
        vocab = json.load(f)
    printable = list(range(ord("!"), ord("~") + 1)) + list(range(0xA1, 0xAD)) + list(range(0xAE, 0x100))
    chars, extra = {}, 0
    for b in range(256):
        chars[chr(b) if b in printable else chr(256 + extra)] = b
        extra += b not in printable
    ranks_by_bytes = {bytes(chars[c] for c in t): i for t, i in vocab.items() if t != "<|endoftext|>"}
    enc = tiktoken.Encoding("bench", pat_str=r"""'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+""",
                            mergeable_ranks=ranks_by_bytes, special_tokens={})
    start = time.perf_counter()
    ids = enc.encode_ordinary(text)
    seconds = time.perf_counter() - start
    print(f"tiktoken, 1 thread: {mb / seconds:.1f} MB/s ({'the same tokens' if ids == reference else 'other tokens'})")
except ImportError:
    print("tiktoken: not installed")
