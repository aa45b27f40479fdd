#include "core/json_value.hpp"

#include <cerrno>
#include <cstdlib>

#include "dtrain/core/error.hpp"

namespace dtrain::json {
namespace {

constexpr int kMaxDepth = 64;
// A value costs about 100 bytes parsed: a header of a million values is already far beyond
// any model's (GPT-2 XL's holds about 3 000), and its parse stays near 100 MB.
constexpr long kMaxValues = 1L << 20;

class Parser {
 public:
  Parser(const std::string& text, const std::string& what) : s_(text), what_(what) {}

  Value document() {
    Value v = value(0);
    skip_space();
    if (pos_ != s_.size()) fail("text after the end of the value");
    return v;
  }

 private:
  [[noreturn]] void fail(const std::string& problem) const {
    DTRAIN_FAIL(Errc::corrupt_data, what_ << ": " << problem << " at byte " << pos_);
  }
  void skip_space() {
    while (pos_ < s_.size() && (s_[pos_] == ' ' || s_[pos_] == '\t' || s_[pos_] == '\n' || s_[pos_] == '\r'))
      ++pos_;
  }
  char peek() {
    skip_space();
    if (pos_ == s_.size()) fail("unexpected end");
    return s_[pos_];
  }
  void expect(char c) {
    if (peek() != c) fail(std::string("expected '") + c + "'");
    ++pos_;
  }
  bool literal(const char* word) {
    const std::string w(word);
    if (s_.compare(pos_, w.size(), w) != 0) return false;
    pos_ += w.size();
    return true;
  }

  Value value(int depth) {
    if (depth >= kMaxDepth) fail("nesting deeper than 64 levels");
    if (++values_ > kMaxValues) fail("more than 2^20 values");
    Value v;
    const char c = peek();
    if (c == '{') {
      v.kind = Value::Kind::object;
      ++pos_;
      if (peek() == '}') {
        ++pos_;
        return v;
      }
      for (;;) {
        if (peek() != '"') fail("expected a member name");
        std::string key = string();
        expect(':');
        v.members.emplace_back(std::move(key), value(depth + 1));
        if (peek() == ',') {
          ++pos_;
          continue;
        }
        expect('}');
        return v;
      }
    }
    if (c == '[') {
      v.kind = Value::Kind::array;
      ++pos_;
      if (peek() == ']') {
        ++pos_;
        return v;
      }
      for (;;) {
        v.items.push_back(value(depth + 1));
        if (peek() == ',') {
          ++pos_;
          continue;
        }
        expect(']');
        return v;
      }
    }
    if (c == '"') {
      v.kind = Value::Kind::string;
      v.text = string();
      return v;
    }
    if (literal("true")) {
      v.kind = Value::Kind::boolean;
      v.boolean = true;
      return v;
    }
    if (literal("false")) {
      v.kind = Value::Kind::boolean;
      return v;
    }
    if (literal("null")) return v;
    v.kind = Value::Kind::number;
    v.text = number();
    return v;
  }

  std::string number() {
    const std::size_t start = pos_;
    auto digits = [&] {
      const std::size_t from = pos_;
      while (pos_ < s_.size() && s_[pos_] >= '0' && s_[pos_] <= '9') ++pos_;
      if (pos_ == from) fail("malformed number");
    };
    if (s_[pos_] == '-') ++pos_;
    digits();
    if (pos_ < s_.size() && s_[pos_] == '.') {
      ++pos_;
      digits();
    }
    if (pos_ < s_.size() && (s_[pos_] == 'e' || s_[pos_] == 'E')) {
      ++pos_;
      if (pos_ < s_.size() && (s_[pos_] == '+' || s_[pos_] == '-')) ++pos_;
      digits();
    }
    return s_.substr(start, pos_ - start);
  }

  unsigned hex4() {
    if (pos_ + 4 > s_.size()) fail("unexpected end in a \\u escape");
    unsigned u = 0;
    for (int i = 0; i < 4; ++i) {
      const char h = s_[pos_++];
      u = u * 16 + (h >= '0' && h <= '9'   ? h - '0'
                    : h >= 'a' && h <= 'f' ? h - 'a' + 10
                    : h >= 'A' && h <= 'F' ? h - 'A' + 10
                                           : (fail("malformed \\u escape"), 0));
    }
    return u;
  }

  void put_utf8(std::string& out, unsigned cp) {
    if (cp < 0x80) {
      out += static_cast<char>(cp);
    } else if (cp < 0x800) {
      out += static_cast<char>(0xC0 | (cp >> 6));
      out += static_cast<char>(0x80 | (cp & 0x3F));
    } else if (cp < 0x10000) {
      out += static_cast<char>(0xE0 | (cp >> 12));
      out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
      out += static_cast<char>(0x80 | (cp & 0x3F));
    } else {
      out += static_cast<char>(0xF0 | (cp >> 18));
      out += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
      out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
      out += static_cast<char>(0x80 | (cp & 0x3F));
    }
  }

  std::string string() {
    ++pos_;  // the opening quote
    std::string out;
    for (;;) {
      if (pos_ >= s_.size()) fail("unterminated string");
      const char c = s_[pos_++];
      if (c == '"') return out;
      if (static_cast<unsigned char>(c) < 0x20) fail("control character in a string");
      if (c != '\\') {
        out += c;
        continue;
      }
      if (pos_ >= s_.size()) fail("unterminated string");
      const char e = s_[pos_++];
      switch (e) {
        case '"': case '\\': case '/': out += e; break;
        case 'b': out += '\b'; break;
        case 'f': out += '\f'; break;
        case 'n': out += '\n'; break;
        case 'r': out += '\r'; break;
        case 't': out += '\t'; break;
        case 'u': {
          unsigned cp = hex4();
          if (cp >= 0xD800 && cp < 0xDC00 && s_.compare(pos_, 2, "\\u") == 0) {  // a surrogate pair
            pos_ += 2;
            const unsigned low = hex4();
            if (low < 0xDC00 || low >= 0xE000) fail("malformed surrogate pair");
            cp = 0x10000 + ((cp - 0xD800) << 10) + (low - 0xDC00);
          }
          put_utf8(out, cp);
          break;
        }
        default: fail("unknown escape");
      }
    }
  }

  const std::string& s_;
  const std::string& what_;
  std::size_t pos_ = 0;
  long values_ = 0;
};

}  // namespace

const Value* Value::find(const std::string& key) const {
  for (const auto& [name, v] : members)
    if (name == key) return &v;
  return nullptr;
}

Value parse(const std::string& text, const std::string& what) { return Parser(text, what).document(); }

std::uint64_t to_u64(const Value& v, const std::string& what) {
  const bool digits_only = v.kind == Value::Kind::number && !v.text.empty() &&
                           v.text.find_first_not_of("0123456789") == std::string::npos;
  DTRAIN_CHECK(digits_only, Errc::corrupt_data, what << " is not a whole number from 0 up");
  errno = 0;
  const unsigned long long n = std::strtoull(v.text.c_str(), nullptr, 10);
  DTRAIN_CHECK(errno == 0, Errc::corrupt_data, what << " (" << v.text << ") is too large");
  return n;
}

double to_double(const Value& v, const std::string& what) {
  DTRAIN_CHECK(v.kind == Value::Kind::number, Errc::corrupt_data, what << " is not a number");
  return std::strtod(v.text.c_str(), nullptr);
}

}  // namespace dtrain::json
