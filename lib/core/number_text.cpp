#include "core/number_text.hpp"

#include <charconv>
#include <cmath>
#include <system_error>

namespace dtrain {
namespace {

template <class T>
std::string shortest(T value) {
  if (std::isnan(value)) return "nan";  // not "-nan": a NaN's sign means nothing
  char text[64];
  const std::to_chars_result r = std::to_chars(text, text + sizeof text, value);
  return r.ec == std::errc() ? std::string(text, r.ptr) : std::string("?");
}

}  // namespace

std::string shortest_text(double value) { return shortest(value); }
std::string shortest_text(float value) { return shortest(value); }

bool parse_whole(const std::string& text, std::uint64_t& value) {
  const char* end = text.data() + text.size();
  const std::from_chars_result r = std::from_chars(text.data(), end, value);
  return !text.empty() && r.ec == std::errc() && r.ptr == end;
}

bool parse_number(const std::string& text, double& value) {
  const char* end = text.data() + text.size();
  const std::from_chars_result r = std::from_chars(text.data(), end, value);
  return !text.empty() && r.ec == std::errc() && r.ptr == end;
}

}  // namespace dtrain
