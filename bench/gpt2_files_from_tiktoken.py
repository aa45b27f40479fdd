#!/usr/bin/env python3
"""gpt2_files_from_tiktoken.py RANKS DIR: GPT-2's tokenizer as Hugging Face ships it
(DIR/vocab.json and DIR/merges.txt) from the same BPE in tiktoken's format (RANKS: lines of
"base64-token rank", as tiktoken's gpt2 ranks and the openai-whisper package's
assets/gpt2.tiktoken hold it). GPT-2's ids are the ranks, bytes first, then each merge's
token in the merges' order, and <|endoftext|> is 50256 (the next id); each merge is found by
encoding its token with the ranks below its own, which leaves the two tokens it joins."""
import base64
import json
import os
import sys

ranks_path, out = sys.argv[1:3]
ranks = {}
with open(ranks_path, encoding="ascii") as f:
    for line in f:
        if line.strip():
            token, rank = line.split()
            ranks[base64.b64decode(token)] = int(rank)


def split(token, limit):
    """token's bytes merged as BPE merges them, with only the ranks below limit."""
    parts = [bytes([b]) for b in token]
    while True:
        best = min(((ranks.get(a + b, limit), k) for k, (a, b) in enumerate(zip(parts, parts[1:]))), default=(limit, 0))
        if best[0] >= limit:
            return parts
        k = best[1]
        parts[k:k + 2] = [parts[k] + parts[k + 1]]


printable = list(range(ord("!"), ord("~") + 1)) + list(range(0xA1, 0xAD)) + list(range(0xAE, 0x100))
chars, extra = {}, 0
for b in range(256):
    chars[b] = chr(b) if b in printable else chr(256 + extra)
    extra += b not in printable
as_chars = lambda p: "".join(chars[b] for b in p)

merges = []
for token, rank in sorted(ranks.items(), key=lambda item: item[1]):
    if len(token) > 1:
        pair = split(token, rank)
        assert len(pair) == 2, (token, pair)
        merges.append(f"{as_chars(pair[0])} {as_chars(pair[1])}")
vocab = {as_chars(t): r for t, r in ranks.items()}
vocab["<|endoftext|>"] = len(ranks)
os.makedirs(out, exist_ok=True)
with open(os.path.join(out, "vocab.json"), "w", encoding="utf-8") as f:
    json.dump(vocab, f, ensure_ascii=False)
with open(os.path.join(out, "merges.txt"), "w", encoding="utf-8") as f:
    f.write("#version: 0.2\n" + "\n".join(merges) + "\n")
print(f"{out}: {len(vocab)} tokens, {len(merges)} merges")
