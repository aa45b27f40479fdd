#!/usr/bin/env python3
"""check_tokenizer.py MPIEXEC NPFLAG GPT WORKDIR: dtrain-gpt --tokenizer against a reference.

A small byte-level BPE tokenizer is trained here on a sample text and written as Hugging
Face writes GPT-2's (vocab.json in GPT-2's byte characters, merges.txt) and as llm.c writes
its tokenizer file. The reference encoder is GPT-2's: the text split by its pattern with the
`regex` module, as OpenAI's encoder.py does, then byte pair merges by rank. For prompts with
contractions, runs of spaces, tabs and newlines, digits, accented, Cyrillic and CJK letters,
superscript digits, emoji and the separators that are not white space (U+001C), the ids
dtrain-gpt encodes must be the reference's, and the text it prints for the tokens it
generates must be the reference's decoding of the same tokens (generated again without the
tokenizer, as ids, greedily). Exits 77 (skipped) where the `regex` module is missing."""
import json
import os
import re
import shutil
import struct
import subprocess
import sys

try:
    import regex
except ImportError:
    print("the regex module is not available: skipped")
    sys.exit(77)

mpiexec, npflag, gpt, work = sys.argv[1:5]
shutil.rmtree(work, ignore_errors=True)
os.makedirs(work)


def byte_characters():
    printable = list(range(ord("!"), ord("~") + 1)) + list(range(0xA1, 0xAD)) + list(range(0xAE, 0x100))
    chars, extra = {}, 0
    for b in range(256):
        if b in printable:
            chars[b] = chr(b)
        else:
            chars[b] = chr(256 + extra)
            extra += 1
    return chars


CHARS = byte_characters()


GPT2_PATTERN = regex.compile(r"""'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+""")


def split_words(text):
    return GPT2_PATTERN.findall(text)


def bpe(word, ranks):
    parts = [bytes([b]) for b in word]
    while len(parts) > 1:
        pairs = [(ranks.get((a, b), 1 << 30), k) for k, (a, b) in enumerate(zip(parts, parts[1:]))]
        best, k = min(pairs)
        if best == 1 << 30:
            break
        left, right, merged, i = parts[k], parts[k + 1], [], 0
        while i < len(parts):
            if i + 1 < len(parts) and parts[i] == left and parts[i + 1] == right:
                merged.append(left + right)
                i += 2
            else:
                merged.append(parts[i])
                i += 1
        parts = merged
    return parts


def encode(text, ranks, ids):
    return [ids[p] for w in split_words(text) for p in bpe(w.encode(), ranks)]


prompts = ["Hello world, it's the world", "they'll  see\n\n  123 apples?!", "Über café naïve",
           "東京都 and Москва", "x² ½ 4567", "smile 🙂 ok", " 'quoted' text  ", "a\n\n\nb  \t c   ",
           "a \x1cb x\u00a0y\u0085z It'S"]
# Merges trained on a sample and the prompts (so that merges of a space with what follows
# it decide how words are cut): the most frequent adjacent pair inside words, 100 times.
sample = ("Hello world, it's the hello of the world. Über café naïve 東京 東京都 Москва москва "
          "We're 123 4567 apples, they'll see. " + " ".join(prompts)) * 3
words = [list(bytes([b]) for b in w.encode()) for w in split_words(sample)]
merges = []
for _ in range(100):
    counts = {}
    for w in words:
        for pair in zip(w, w[1:]):
            counts[pair] = counts.get(pair, 0) + 1
    if not counts:
        break
    pair = max(counts, key=lambda p: (counts[p], p))
    merges.append(pair)
    for w in words:
        i = 0
        while i + 1 < len(w):
            if (w[i], w[i + 1]) == pair:
                w[i:i + 2] = [w[i] + w[i + 1]]
            i += 1
pieces = [bytes([b]) for b in range(256)] + [a + b for a, b in merges]
pieces = list(dict.fromkeys(pieces))  # a merge may repeat an earlier piece
ids = {p: i for i, p in enumerate(pieces)}
ranks = {pair: r for r, pair in enumerate(merges)}
as_chars = lambda p: "".join(CHARS[b] for b in p)
tok_dir = os.path.join(work, "tok")
os.makedirs(tok_dir)
with open(os.path.join(tok_dir, "vocab.json"), "w", encoding="utf-8") as f:
    json.dump({as_chars(p): i for i, p in enumerate(pieces)}, f, ensure_ascii=False)
with open(os.path.join(tok_dir, "merges.txt"), "w", encoding="utf-8") as f:
    f.write("#version: 0.2\n" + "".join(f"{as_chars(a)} {as_chars(b)}\n" for a, b in merges))
llmc = os.path.join(work, "tokenizer.bin")
with open(llmc, "wb") as f:
    head = [20240328, 2, len(pieces), len(pieces) - 1] + [0] * 252
    f.write(struct.pack("<256I", *head) + b"".join(bytes([len(p)]) + p for p in pieces))

vocab = 384
assert len(pieces) <= vocab
model = ["--layers", "1", "--heads", "2", "--d-model", "32", "--seq-len", "64", "--vocab", str(vocab),
         "--eval-only", "--eval-batches", "1", "--micro-batch", "1", "--temperature", "0", "--generate", "12"]
failures = []


def run(args):
    r = subprocess.run([mpiexec, npflag, "1", gpt] + model + args, capture_output=True,
                       stdin=subprocess.DEVNULL, timeout=120)
    if r.returncode != 0:
        sys.exit(f"FAIL: {args} exited {r.returncode}:\n{r.stderr.decode(errors='replace')[-2000:]}")
    return r.stdout, r.stderr.decode(errors="replace")


for prompt in prompts:
    want = encode(prompt, ranks, ids)
    _, log = run(["--tokenizer", tok_dir, "--prompt", prompt])
    m = re.search(r"after the prompt '.*' \(([0-9 ]+)\):", log, re.S)
    got = [int(x) for x in m.group(1).split()] if m else None
    if got != want:
        failures.append(f"{prompt!r}: encoded {got}, the reference {want}")
        continue
    # The same tokens generated without the tokenizer, printed as ids; with it, as text.
    as_ids, _ = run(["--prompt", " ".join(map(str, want))])
    generated = [int(x) for x in as_ids.split()]
    as_text, _ = run(["--tokenizer", os.path.join(tok_dir, "vocab.json"), "--prompt", prompt])
    from_llmc, _ = run(["--tokenizer", llmc, "--prompt", " ".join(map(str, want))])
    expected = b"".join(pieces[t] if t < len(pieces) else f"<|{t}|>".encode() for t in generated) + b"\n"
    if as_text != expected or from_llmc != expected:
        failures.append(f"{prompt!r}: printed {as_text!r} and {from_llmc!r} (llm.c file) for tokens {generated}, "
                        f"expected {expected!r}")
    else:
        print(f"{prompt!r}: {len(want)} tokens as the reference encodes them; {len(generated)} generated, "
              f"printed as the reference decodes them")

if failures:
    sys.exit("FAIL:\n" + "\n".join(failures))
print("ok: --tokenizer encodes and decodes as GPT-2's encoder")
