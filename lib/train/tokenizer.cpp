#include "dtrain/train/tokenizer.hpp"

#include <algorithm>
#include <array>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <sstream>
#include <unordered_map>
#include <utility>

#include "core/json_value.hpp"
#include "dtrain/core/error.hpp"
#include "train/unicode_classes.hpp"

namespace dtrain::train {
namespace {

namespace fs = std::filesystem;

// GPT-2 writes every byte of its tokens as a printable character: the printable Latin-1
// bytes as themselves, the other 68 (controls, space, 127-160, 173) as U+0100 onwards, in
// byte order. The code point of each byte, and the byte of each code point.
struct ByteCharacters {
  char32_t of_byte[256];
  std::map<char32_t, unsigned char> byte_of;
  ByteCharacters() {
    int next = 0;
    for (int b = 0; b < 256; ++b) {
      const bool printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
      of_byte[b] = printable ? static_cast<char32_t>(b) : static_cast<char32_t>(256 + next++);
      byte_of[of_byte[b]] = static_cast<unsigned char>(b);
    }
  }
};

const ByteCharacters& byte_characters() {
  static const ByteCharacters table;
  return table;
}

// The code point at s[i] and its length in bytes; a byte that does not start valid UTF-8
// is one "code point" of its own (returned as char32_t(-1), which no class holds).
std::size_t next_code_point(std::string_view s, std::size_t i, char32_t& cp) {
  const auto b = [&](std::size_t k) { return static_cast<unsigned char>(s[k]); };
  const unsigned char lead = b(i);
  int n = lead < 0x80 ? 1 : (lead >> 5) == 0x6 ? 2 : (lead >> 4) == 0xE ? 3 : (lead >> 3) == 0x1E ? 4 : 0;
  cp = n == 1 ? lead : n == 2 ? lead & 0x1F : n == 3 ? lead & 0x0F : lead & 0x07;
  bool ok = n > 0 && i + n <= s.size();
  for (int k = 1; ok && k < n; ++k) {
    ok = (b(i + k) & 0xC0) == 0x80;
    cp = (cp << 6) | (b(i + k) & 0x3F);
  }
  static constexpr char32_t kMin[] = {0, 0, 0x80, 0x800, 0x10000};
  if (!ok || cp < kMin[n] || cp > 0x10FFFF || (cp >= 0xD800 && cp < 0xE000)) {
    cp = static_cast<char32_t>(-1);
    return 1;
  }
  return static_cast<std::size_t>(n);
}

// A token's text in GPT-2's characters (UTF-8) as its bytes.
std::string token_bytes(const std::string& text, const std::string& where) {
  const ByteCharacters& chars = byte_characters();
  std::string out;
  for (std::size_t i = 0; i < text.size();) {
    char32_t cp;
    i += next_code_point(text, i, cp);
    const auto it = chars.byte_of.find(cp);
    DTRAIN_CHECK(it != chars.byte_of.end(), Errc::corrupt_data,
                 where << ": token '" << text << "' holds a character that stands for no byte");
    out += static_cast<char>(it->second);
  }
  return out;
}

std::string read_file(const fs::path& path) {
  // (a FIFO would block the open until some process writes it)
  DTRAIN_CHECK(fs::is_regular_file(path), Errc::io, "--tokenizer: '" << path.string() << "' is not a regular file");
  std::ifstream in(path, std::ios::binary);
  DTRAIN_CHECK(in, Errc::io, "--tokenizer: cannot open '" << path.string() << "'");
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

// The class of each ASCII character, looked up once (most text is ASCII).
CharClass class_of(char32_t cp) {
  static const auto ascii = [] {
    std::array<CharClass, 128> table{};
    for (char32_t c = 0; c < 128; ++c) table[c] = char_class(c);
    return table;
  }();
  return cp < 128 ? ascii[cp] : cp == static_cast<char32_t>(-1) ? CharClass::other : char_class(cp);
}

struct CodePoint {
  CharClass cls;
  std::size_t length;  // in bytes
};

CodePoint code_point_at(std::string_view text, std::size_t i) {
  char32_t cp;
  const std::size_t length = next_code_point(text, i, cp);
  return {class_of(cp), length};
}

// Calls word(begin, length) for each word of text, in order (GPT-2's pattern, gpt2_words),
// reading the text once, without a copy.
template <class Word>
void for_each_word(std::string_view text, Word&& word) {
  const std::size_t n = text.size();
  // A contraction's characters are ASCII, so comparing bytes compares characters.
  const auto is = [&](std::size_t i, char c) { return i < n && text[i] == c; };
  for (std::size_t i = 0; i < n;) {
    std::size_t end = i;
    if (is(i, '\'') && (is(i + 1, 's') || is(i + 1, 't') || is(i + 1, 'm') || is(i + 1, 'd'))) {
      end = i + 2;  // 's 't 'm 'd
    } else if (is(i, '\'') && (((is(i + 1, 'r') || is(i + 1, 'v')) && is(i + 2, 'e')) || (is(i + 1, 'l') && is(i + 2, 'l')))) {
      end = i + 3;  // 're 've 'll
    } else {
      // A run of letters, of numbers or of other symbols, with the one space before it.
      CharClass cls = code_point_at(text, i).cls;
      std::size_t first = i;
      if (is(i, ' ') && i + 1 < n && code_point_at(text, i + 1).cls != CharClass::space) {
        first = i + 1;
        cls = code_point_at(text, first).cls;
      }
      if (cls != CharClass::space) {
        end = first;
        for (CodePoint c; end < n && (c = code_point_at(text, end)).cls == cls;) end += c.length;
      } else {
        // White space: the whole run at the end of the text, else all of it but its last
        // character (which goes with the word after it), or one character alone.
        std::size_t last = i, characters = 0;
        for (CodePoint c; end < n && (c = code_point_at(text, end)).cls == CharClass::space; ++characters) {
          last = end;
          end += c.length;
        }
        if (end < n && characters >= 2) end = last;
      }
    }
    word(i, end - i);
    i = end;
  }
}

bool ascii_space(char c) { return c == ' ' || (c >= '\t' && c <= '\r'); }

// Whether the character that ends at text[end - 1] is not white space. A byte that is not a
// continuation byte always begins a character (or is one of its own, not UTF-8), so the
// character is found by stepping back over continuation bytes. False where the text does not
// show its beginning (a window that starts inside it).
bool non_space_ends_at(std::string_view text, std::size_t end) {
  const auto continuation = [&](std::size_t k) { return (static_cast<unsigned char>(text[k]) & 0xC0) == 0x80; };
  if (end == 0) return false;
  std::size_t begin = end - 1;
  for (int back = 0; back < 3 && continuation(begin); ++back) {
    if (begin == 0) return false;
    --begin;
  }
  char32_t cp;
  const std::size_t length = next_code_point(text, begin, cp);
  // Not the character that ends there: text[end - 1] is a byte of its own, not UTF-8.
  return begin + length != end || class_of(cp) != CharClass::space;
}

// Whether the character that begins at text[begin] is not white space; false where the text
// ends inside it (its first byte announces more bytes than there are), as a block does.
bool non_space_starts_at(std::string_view text, std::size_t begin) {
  if (begin >= text.size()) return false;
  const unsigned char lead = static_cast<unsigned char>(text[begin]);
  const std::size_t announced = lead < 0xC0 ? 1 : lead < 0xE0 ? 2 : lead < 0xF0 ? 3 : 4;
  return begin + announced <= text.size() && code_point_at(text, begin).cls != CharClass::space;
}

}  // namespace

std::vector<std::string> gpt2_words(const std::string& text) {
  std::vector<std::string> words;
  for_each_word(text, [&](std::size_t begin, std::size_t length) { words.push_back(text.substr(begin, length)); });
  return words;
}

bool gpt2_can_cut(std::string_view text, std::size_t p) {
  if (p < 2 || p >= text.size() || !ascii_space(text[p - 1]) || !non_space_ends_at(text, p - 1)) return false;
  // One white space character between two others: it is a word of its own. Two: the first
  // ends the text before p, the second begins (with a space: " word") the text after it.
  if (text[p - 1] != ' ' && non_space_starts_at(text, p)) return true;
  return p + 1 < text.size() && ascii_space(text[p]) && non_space_starts_at(text, p + 1);
}

Tokenizer::Tokenizer(const std::string& path) : path_(path) {
  std::fill(std::begin(byte_id_), std::end(byte_id_), -1);
  fs::path vocab = path;
  if (fs::is_directory(vocab)) vocab /= "vocab.json";
  DTRAIN_CHECK(fs::is_regular_file(vocab), Errc::io,
               "--tokenizer '" << vocab.string() << "': " << (fs::exists(vocab) ? "not a regular file" : "no such file"));
  path_ = vocab.string();
  const std::string text = read_file(vocab);
  std::uint32_t header[4] = {};
  if (text.size() >= sizeof header) std::memcpy(header, text.data(), sizeof header);
  if (header[0] == 20240328 && (header[1] == 1 || header[1] == 2)) {
    // llm.c: 256 uint32 of header (magic, version, token count), then per token its length
    // (one byte) and its bytes.
    kind_ = "llm.c tokenizer, decodes only";
    DTRAIN_CHECK(text.size() >= 1024, Errc::corrupt_data,
                 "--tokenizer '" << path_ << "' is llm.c's tokenizer cut short: " << text.size()
                                 << " bytes, fewer than its 1024-byte header");
    DTRAIN_CHECK(header[2] <= text.size() - 1024, Errc::corrupt_data,
                 "--tokenizer '" << path_ << "' is shorter than its " << header[2] << " tokens");
    std::size_t pos = 1024;
    pieces_.resize(header[2]);
    for (std::string& piece : pieces_) {
      DTRAIN_CHECK(pos < text.size() && pos + 1 + static_cast<unsigned char>(text[pos]) <= text.size(),
                   Errc::corrupt_data, "--tokenizer '" << path_ << "' is shorter than its " << header[2] << " tokens");
      piece = text.substr(pos + 1, static_cast<unsigned char>(text[pos]));
      pos += 1 + piece.size();
    }
    DTRAIN_CHECK(pos == text.size(), Errc::corrupt_data,
                 "--tokenizer '" << path_ << "' holds " << text.size() - pos << " bytes after its " << header[2]
                                 << " tokens (another file appended, or a wrong token count)");
    for (std::size_t id = 0; id < pieces_.size(); ++id) id_of_.emplace(pieces_[id], static_cast<std::int32_t>(id));
    return;
  }
  // Hugging Face: {"token": id, ...} in GPT-2's characters, and merges.txt: "#version" then
  // one merge a line, "left right", highest priority first.
  const json::Value root =
      json::parse(text, "--tokenizer '" + path_ + "' is neither llm.c's tokenizer nor a vocab.json (JSON)");
  DTRAIN_CHECK(root.kind == json::Value::Kind::object && !root.members.empty(), Errc::corrupt_data,
               "--tokenizer '" << path_ << "' is neither a vocab.json (a JSON object of tokens) nor llm.c's tokenizer");
  // Ids are a token table's indices: a sparse table (16 slots a token) is refused before it is allocated.
  const std::uint64_t id_limit = std::min<std::uint64_t>(INT32_MAX, 16 * root.members.size());
  for (const auto& [token, id_value] : root.members) {
    const std::uint64_t id = json::to_u64(id_value, "--tokenizer '" + path_ + "': the id of '" + token + "'");
    DTRAIN_CHECK(id < id_limit, Errc::corrupt_data,
                 "--tokenizer '" << path_ << "': id " << id << " of '" << token << "' is out of range (a vocab.json of "
                 << root.members.size() << " tokens has ids below " << id_limit << ")");
    if (id >= pieces_.size()) pieces_.resize(id + 1);
    pieces_[id] = token_bytes(token, "--tokenizer '" + path_ + "'");
    id_of_[pieces_[id]] = static_cast<std::int32_t>(id);
    if (pieces_[id].size() == 1) byte_id_[static_cast<unsigned char>(pieces_[id][0])] = static_cast<std::int32_t>(id);
  }
  const fs::path merges = vocab.parent_path() / "merges.txt";
  if (!fs::exists(merges)) {
    kind_ = "GPT-2 BPE, decodes only: no merges.txt beside it";
    return;
  }
  std::istringstream lines(read_file(merges));
  std::string line;
  int rank = 0;
  while (std::getline(lines, line)) {
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (line.empty() || (rank == 0 && line.rfind("#version", 0) == 0)) continue;
    const std::size_t space = line.find(' ');
    DTRAIN_CHECK(space != std::string::npos && space > 0 && line.find(' ', space + 1) == std::string::npos,
                 Errc::corrupt_data, "--tokenizer: '" << merges.string() << "' line '" << line << "' is not a merge 'left right'");
    const std::string where = "--tokenizer: '" + merges.string() + "'";
    const std::string left = token_bytes(line.substr(0, space), where), right = token_bytes(line.substr(space + 1), where);
    const std::int32_t l = id(left), r = id(right), merged = id(left + right);
    if (l < 0 || r < 0 || merged < 0) {
      // Not this vocabulary's merges (Hugging Face refuses them too): its tokens still decode.
      merges_.clear();
      kind_ = "GPT-2 BPE, decodes only: merges.txt's merge '" + line + "' makes or uses a token vocab.json does not have";
      return;
    }
    // A merge listed twice takes its later rank, as GPT-2's encoder reads the file.
    merges_[static_cast<std::uint64_t>(l) << 32 | static_cast<std::uint32_t>(r)] = Merge{rank++, merged};
  }
  kind_ = encodes() ? "GPT-2 BPE with merges.txt" : "GPT-2 BPE, decodes only: merges.txt holds no merges";
}

const std::string& Tokenizer::bytes(std::int32_t token) const {
  static const std::string none;
  return token >= 0 && token < size() ? pieces_[static_cast<std::size_t>(token)] : none;
}

std::vector<std::int32_t> Tokenizer::encode(const std::string& text) const {
  std::vector<std::int32_t> ids;
  encode(std::string_view(text), ids);
  return ids;
}

void Tokenizer::encode(std::string_view text, std::vector<std::int32_t>& out) const {
  DTRAIN_CHECK(encodes(), Errc::invalid_argument, "--tokenizer '" << path_ << "' cannot encode text (" << kind_ << ")");
  // A word met before in this text is copied from its first tokens: most words of a long
  // text recur, and merging costs more than a lookup.
  std::unordered_map<std::string_view, std::pair<std::size_t, std::size_t>> seen;  // word -> its tokens in out
  for_each_word(text, [&](std::size_t begin, std::size_t length) {
    const std::string_view word = text.substr(begin, length);
    const auto [it, added] = seen.try_emplace(word, out.size(), 0);
    if (!added) {
      const std::size_t from = it->second.first, n = it->second.second, at = out.size();
      out.resize(at + n);
      std::copy_n(out.begin() + static_cast<std::ptrdiff_t>(from), n, out.begin() + static_cast<std::ptrdiff_t>(at));
      return;
    }
    encode_word(word, out);
    it->second.second = out.size() - it->second.first;
  });
}

std::int32_t Tokenizer::id(const std::string& bytes) const {
  const auto it = id_of_.find(bytes);
  return it == id_of_.end() ? -1 : it->second;
}

// Byte pair encoding: start from single bytes and merge, again and again, the adjacent pair
// that comes first among the merges, every occurrence of it from left to right. The word's
// tokens are appended to out and merged there, in place.
void Tokenizer::encode_word(std::string_view word, std::vector<std::int32_t>& out) const {
  const std::size_t first = out.size();
  for (const char c : word) {
    const std::int32_t id = byte_id_[static_cast<unsigned char>(c)];
    // (GPT-2's vocabulary has all 256: a smaller one encodes only the texts of its bytes.)
    DTRAIN_CHECK(id >= 0, Errc::invalid_config,
                 "--tokenizer '" << path_ << "' has no token for the byte " << static_cast<int>(static_cast<unsigned char>(c))
                                 << " (a byte-level BPE has one for each of the 256): it cannot encode this text");
    out.push_back(id);
  }
  const auto merge_of = [&](std::size_t i) {
    const auto it = merges_.find(static_cast<std::uint64_t>(out[i]) << 32 | static_cast<std::uint32_t>(out[i + 1]));
    return it == merges_.end() ? nullptr : &it->second;
  };
  while (out.size() - first > 1) {
    const Merge* best = nullptr;
    std::int32_t left = 0, right = 0;
    for (std::size_t i = first; i + 1 < out.size(); ++i) {
      const Merge* m = merge_of(i);
      if (m && (!best || m->rank < best->rank)) {
        best = m;
        left = out[i];
        right = out[i + 1];
      }
    }
    if (!best) break;
    std::size_t kept = first;
    for (std::size_t i = first; i < out.size(); ++i) {
      if (i + 1 < out.size() && out[i] == left && out[i + 1] == right) {
        out[kept++] = best->id;
        ++i;
      } else {
        out[kept++] = out[i];
      }
    }
    out.resize(kept);
  }
}

std::string Tokenizer::describe() const {
  return "'" + path_ + "' (" + std::to_string(size()) + " tokens, " + kind_ + ")";
}

}  // namespace dtrain::train
