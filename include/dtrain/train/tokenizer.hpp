#pragma once
// GPT-2's byte-level BPE tokens as text (dtrain-gpt --tokenizer, docs/dtrain-gpt.md): the
// generated tokens printed as text, and a prompt given as text turned into tokens.
#include <cstdint>
#include <string>
#include <string_view>
#include <unordered_map>
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
  bool encodes() const noexcept { return !merges_.empty(); }
  // The bytes of a token ("" for an id the tokenizer has none for).
  const std::string& bytes(std::int32_t token) const;
  // GPT-2's encoding: the text split into words as its pattern splits it (contractions,
  // letters, numbers, other symbols, each with one space before it, and runs of white space),
  // then each word's bytes merged pair by pair in the merges' order. Errc::invalid_argument
  // where encodes() is false.
  std::vector<std::int32_t> encode(const std::string& text) const;
  // The same, appended to out (dtrain-data encode's long texts).
  void encode(std::string_view text, std::vector<std::int32_t>& out) const;
  // The id of the token whose bytes these are (a special one such as "<|endoftext|>"
  // included); -1 where there is none.
  std::int32_t id(const std::string& bytes) const;
  // "'gpt2/vocab.json' (50257 tokens, GPT-2 BPE with merges.txt)"
  std::string describe() const;

 private:
  void encode_word(std::string_view word, std::vector<std::int32_t>& out) const;

  struct Merge {
    int rank;          // its line in merges.txt: lower merges first
    std::int32_t id;   // the merged token
  };
  std::string path_, kind_;
  std::vector<std::string> pieces_;                        // id -> bytes
  std::unordered_map<std::string, std::int32_t> id_of_;    // bytes -> id
  std::int32_t byte_id_[256];                              // a single byte's id, -1: none
  std::unordered_map<std::uint64_t, Merge> merges_;        // (left id << 32 | right id) -> merge
};

// Text split into words as GPT-2's pattern does ('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+|
// ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+), as byte ranges of the UTF-8 text; a byte that is not
// valid UTF-8 counts as a symbol of its own.
DTRAIN_API std::vector<std::string> gpt2_words(const std::string& text);

// Whether text[0, p) and text[p, end) encode to the tokens the whole text does, by a rule
// simple enough to find cuts in a long file: before p a character that is not white space,
// then one ASCII white space character other than a space, then at p one that is not white
// space ("x\ny": the newline is a word of its own); or before p such a character and one
// ASCII white space character, then at p another and one that is not white space ("x\r|\ny",
// "x\n| y"). Only what text shows counts: a window that begins inside the character before
// p, or ends inside the one after it, has no cut there. dtrain-data encode cuts files there to share them over ranks.
DTRAIN_API bool gpt2_can_cut(std::string_view text, std::size_t p);

}  // namespace dtrain::train
