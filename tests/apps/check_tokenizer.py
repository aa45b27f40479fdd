#!/usr/bin/env python3
"""check_tokenizer.py MPIEXEC NPFLAG GPT WORKDIR: dtrain-gpt --tokenizer against a reference.

A small byte-level BPE tokenizer is trained here on a sample text and written as Hugging
Face writes GPT-2's (vocab.json in GPT-2's byte characters, merges.txt) and as llm.c writes
its tokenizer file. The reference encoder is GPT-2's: the text split by its pattern with the
`regex` module, as OpenAI's encoder.py does, then byte pair merges by rank. For prompts with
contractions, runs of spaces, tabs and newlines, digits, accented, Cyrillic and CJK letters,
superscript digits, letters new in Unicode 15.0, emoji and the separators that are not white space (U+001C), the ids
dtrain-gpt encodes must be the reference's, and the text it prints for the tokens it
generates must be the reference's decoding of the same tokens (generated again without the
tokenizer, as ids, greedily). Exits 77 (skipped) where the `regex` module is missing."""
import os
import re
import shutil
import subprocess
import sys

try:
    import regex  # bpe_files needs it too
except ImportError:
    print("the regex module is not available: skipped")
    sys.exit(77)

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bpe_files import encode, train, write_hf, write_llmc  # noqa: E402

mpiexec, npflag, gpt, work = sys.argv[1:5]
shutil.rmtree(work, ignore_errors=True)
os.makedirs(work)

prompts = ["Hello world, it's the world", "they'll  see\n\n  123 apples?!", "Über café naïve",
           "東京都 and Москва", "x² ½ 4567", "smile 🙂 ok", " 'quoted' text  ", "a\n\n\nb  \t c   ",
           "a \x1cb x\u00a0y\u0085z It'S"]
# Letters of Unicode 15.0 (CJK Ext. H, a modifier letter), where the reference's regex module
# knows them (its tables are older than 15.0 before its 2022 releases).
if regex.match(r"\p{L}", "\U00031350"):
    prompts.append("x\U00031350 a\U0001E030b")
# Merges trained on a sample and the prompts (so that merges of a space with what follows
# it decide how words are cut): the most frequent adjacent pair inside words, 100 times.
sample = ("Hello world, it's the hello of the world. Über café naïve 東京 東京都 Москва москва "
          "We're 123 4567 apples, they'll see. " + " ".join(prompts)) * 3
pieces, merges = train(sample, 100)
ids = {p: i for i, p in enumerate(pieces)}
ranks = {pair: r for r, pair in enumerate(merges)}
tok_dir = os.path.join(work, "tok")
write_hf(tok_dir, pieces, merges)
llmc = os.path.join(work, "tokenizer.bin")
write_llmc(llmc, pieces)

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
    if len(generated) != 12:  # --generate 12: an empty stdout would print as an empty text
        failures.append(f"{prompt!r}: {len(generated)} tokens printed as ids, not 12: {as_ids!r}")
        continue
    as_text, _ = run(["--tokenizer", os.path.join(tok_dir, "vocab.json"), "--prompt", prompt])
    from_llmc, _ = run(["--tokenizer", llmc, "--prompt", " ".join(map(str, want))])
    expected = b"".join(pieces[t] if t < len(pieces) else f"<|{t}|>".encode() for t in generated) + b"\n"
    if as_text != expected or from_llmc != expected:
        failures.append(f"{prompt!r}: printed {as_text!r} and {from_llmc!r} (llm.c file) for tokens {generated}, "
                        f"expected {expected!r}")
    else:
        print(f"{prompt!r}: {len(want)} tokens as the reference encodes them; {len(generated)} generated, "
              f"printed as the reference decodes them")

# A tokenizer given to one rank only: refused by every rank before anything is generated.
r = subprocess.run([mpiexec, npflag, "1", gpt] + model + ["--tokenizer", llmc, "--prompt", "1 2", ":", npflag, "1", gpt]
                   + model + ["--prompt", "1 2"], capture_output=True, stdin=subprocess.DEVNULL, timeout=120)
if r.returncode != 2 or b"--tokenizer is" not in r.stderr:
    failures.append(f"--tokenizer on one rank only: exit {r.returncode}, {r.stderr.decode(errors='replace')[-800:]!r}")

# A merges.txt line naming a token vocab.json lacks leaves a tokenizer that only decodes: a
# text prompt is then refused, saying why.
bad_dir = os.path.join(work, "tok_bad_merge")
write_hf(bad_dir, pieces, merges)
with open(os.path.join(bad_dir, "merges.txt"), "a", encoding="utf-8") as f:
    f.write("zz q\n")
r = subprocess.run([mpiexec, npflag, "1", gpt] + model + ["--tokenizer", bad_dir, "--prompt", "hello"],
                   capture_output=True, stdin=subprocess.DEVNULL, timeout=120)
if r.returncode != 2 or b"decodes only: merges.txt's merge 'zz q' makes or uses a token" not in r.stderr:
    failures.append(f"a bad merge: exit {r.returncode}, {r.stderr.decode(errors='replace')[-800:]!r}")

# llm.c files cut inside the header or with bytes after the tokens: refused, saying which.
with open(llmc, "rb") as f:
    whole = f.read()
for name, content, text in (("cut.bin", whole[:500], b"cut short: 500 bytes, fewer than its 1024-byte header"),
                            ("appended.bin", whole + b"xy", b"holds 2 bytes after its")):
    path = os.path.join(work, name)
    with open(path, "wb") as f:
        f.write(content)
    r = subprocess.run([mpiexec, npflag, "1", gpt] + model + ["--tokenizer", path, "--prompt", "1 2"],
                       capture_output=True, stdin=subprocess.DEVNULL, timeout=120)
    if r.returncode != 1 or text not in r.stderr:
        failures.append(f"{name}: exit {r.returncode}, {r.stderr.decode(errors='replace')[-800:]!r}")

if failures:
    sys.exit("FAIL:\n" + "\n".join(failures))
print("ok: --tokenizer encodes and decodes as GPT-2's encoder")
