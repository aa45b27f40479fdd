"""GPT-2's byte-level BPE in Python, for tests and benchmarks: train a small one, write it as
Hugging Face writes GPT-2's (vocab.json in GPT-2's byte characters, merges.txt) and as llm.c
writes its tokenizer file, and encode text as OpenAI's encoder does (the text split by GPT-2's
pattern with the `regex` module, then byte pair merges by rank) as an independent reference.

    bpe_files.py TEXT MERGES DIR    trains MERGES merges on file TEXT and writes DIR/vocab.json
                                    and DIR/merges.txt, <|endoftext|> the last token.
"""
import json
import os
import struct
import sys

import regex

GPT2_PATTERN = regex.compile(r"""'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+""")
EOT = b"<|endoftext|>"


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


def split_words(text):
    return GPT2_PATTERN.findall(text)


def train(text, n_merges):
    """The most frequent adjacent pair inside words, merged n_merges times (ties: the larger
    pair). Returns (pieces, merges): pieces the tokens' bytes by id (256 bytes first)."""
    counts = {}
    for w in split_words(text):
        key = tuple(bytes([b]) for b in w.encode())
        counts[key] = counts.get(key, 0) + 1
    words = [[list(k), c] for k, c in counts.items()]
    pairs, where = {}, {}  # pair -> count, pair -> indices of words holding it

    def add(i, sign):
        w, c = words[i]
        for pair in zip(w, w[1:]):
            pairs[pair] = pairs.get(pair, 0) + sign * c
            if sign > 0:
                where.setdefault(pair, set()).add(i)

    for i in range(len(words)):
        add(i, 1)
    merges = []
    for _ in range(n_merges):
        live = [(c, p) for p, c in pairs.items() if c > 0]
        if not live:
            break
        _, pair = max(live)
        merges.append(pair)
        for i in list(where.get(pair, ())):
            w = words[i][0]
            add(i, -1)
            k = 0
            while k + 1 < len(w):
                if (w[k], w[k + 1]) == pair:
                    w[k:k + 2] = [w[k] + w[k + 1]]
                k += 1
            add(i, 1)
    pieces = list(dict.fromkeys([bytes([b]) for b in range(256)] + [a + b for a, b in merges]))
    return pieces, merges


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
    """Token ids of text (str, or bytes decoded as UTF-8 with surrogate escapes kept as bytes)."""
    return [ids[p] for w in split_words(text) for p in bpe(w.encode("utf-8", "surrogateescape"), ranks)]


def write_hf(directory, pieces, merges):
    os.makedirs(directory, exist_ok=True)
    as_chars = lambda p: "".join(CHARS[b] for b in p)
    with open(os.path.join(directory, "vocab.json"), "w", encoding="utf-8") as f:
        json.dump({as_chars(p) if p != EOT else EOT.decode(): i for i, p in enumerate(pieces)}, f, ensure_ascii=False)
    with open(os.path.join(directory, "merges.txt"), "w", encoding="utf-8") as f:
        f.write("#version: 0.2\n" + "".join(f"{as_chars(a)} {as_chars(b)}\n" for a, b in merges))


def write_llmc(path, pieces):
    with open(path, "wb") as f:
        head = [20240328, 2, len(pieces), len(pieces) - 1] + [0] * 252
        f.write(struct.pack("<256I", *head) + b"".join(bytes([len(p)]) + p for p in pieces))


if __name__ == "__main__":
    text_path, n, out = sys.argv[1], int(sys.argv[2]), sys.argv[3]
    with open(text_path, encoding="utf-8", errors="surrogateescape") as f:
        pieces, merges = train(f.read(), n)
    write_hf(out, pieces + [EOT], merges)
    print(f"{out}: {len(pieces) + 1} tokens, {len(merges)} merges")
