#pragma once
// Numbers as the shortest text that reads back as the same value: 0.003, not
// 0.0030000000000000001; 0.95f as 0.95, not its double's 0.949999988079071; any NaN as nan.
#include <cstdint>
#include <string>

namespace dtrain {

std::string shortest_text(double value);
std::string shortest_text(float value);

// `text` read as a whole number of digits only ("42", "007"; not "-1", "1e3" or one past
// 2^64 - 1); false for anything else.
bool parse_whole(const std::string& text, std::uint64_t& value);

// `text` read as a whole number or decimal ("0.003", "1e-8", "65536"); false for anything
// else (a path, "true", an empty string, trailing characters).
bool parse_number(const std::string& text, double& value);

}  // namespace dtrain
