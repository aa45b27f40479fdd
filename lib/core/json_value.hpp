#pragma once
// A small JSON reader for what dtrain reads written by other tools: the header of a
// safetensors file, a Hugging Face config.json and a tokenizer's vocab.json. Objects keep their members in file order;
// numbers keep their text, converted on request, so a 64-bit offset loses nothing.
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace dtrain::json {

struct Value {
  enum class Kind { null, boolean, number, string, array, object };
  Kind kind = Kind::null;
  bool boolean = false;
  std::string text;                                     // a string's value, a number's text
  std::vector<Value> items;                             // an array's
  std::vector<std::pair<std::string, Value>> members;   // an object's

  const Value* find(const std::string& key) const;      // an object's member; null if absent
};

// The JSON text parsed whole; Errc::corrupt_data "<what>: <problem> at byte N" otherwise.
// Nesting deeper than 64 levels, and more than 2^20 values, are refused rather than followed.
Value parse(const std::string& text, const std::string& what);

// A number that is a whole number from 0 to 2^64-1 (written without fraction or exponent);
// Errc::corrupt_data naming `what` otherwise.
std::uint64_t to_u64(const Value& v, const std::string& what);
// Any number; Errc::corrupt_data naming `what` for another kind of value.
double to_double(const Value& v, const std::string& what);

}  // namespace dtrain::json
