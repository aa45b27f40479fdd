#pragma once
// GPT-2's byte-level BPE tokens as text (dtrain-gpt --tokenizer, docs/dtrain-gpt.md): the
// generated tokens printed as text, and a prompt given as text turned into tokens.
#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "dtrain/export.hpp"

namespace dtrain::train {

class DTRAIN_API Tokenizer {
 public:
  // path: Hugging Face's vocab.json (with merges.txt beside it, the tokenizer also encodes),
  // a directory holding them, or llm.c's tokenizer file (gpt2_tokenizer.bin: decodes only).
  // Errc::io when it cannot be read, Errc::corrupt_data when it is not one of these.
  explicit Tokenizer(const std::string& path);

  int size() const noexcept { return static_cast<int>(pieces_.size()); }  // largest id + 1
  bool encodes() const noexcept { return !merge_rank_.empty(); }
  // The bytes of a token ("" for an id the tokenizer has none for).
  const std::string& bytes(std::int32_t token) const;
  // GPT-2's encoding: the text split into words as its pattern splits it (contractions,
  // letters, numbers, other symbols, each with one space before it, and runs of white space),
  // then each word's bytes merged pair by pair in the merges' order. Errc::invalid_argument
  // where encodes() is false.
  std::vector<std::int32_t> encode(const std::string& text) const;
  // "'gpt2/vocab.json' (50257 tokens, GPT-2 BPE with merges.txt)"
  std::string describe() const;

 private:
  std::vector<std::int32_t> encode_word(const std::string& word) const;

  std::string path_, kind_;
  std::vector<std::string> pieces_;                    // id -> bytes
  std::map<std::string, std::int32_t> id_of_;          // bytes -> id
  std::map<std::pair<std::string, std::string>, int> merge_rank_;
};

// Text split into words as GPT-2's pattern does ('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+|
// ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+), as byte ranges of the UTF-8 text; a byte that is not
// valid UTF-8 counts as a symbol of its own.
DTRAIN_API std::vector<std::string> gpt2_words(const std::string& text);

}  // namespace dtrain::train
