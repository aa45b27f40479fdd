#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <limits>

#include "core/number_text.hpp"
#include "dtrain/core/buffer.hpp"
#include "dtrain/core/env.hpp"
#include "dtrain/core/error.hpp"
#include "dtrain/core/log.hpp"
#include "dtrain/core/timer.hpp"
#include "dtrain/version.hpp"

using namespace dtrain;

// The library a program runs with says its version: the one these headers were made with.
TEST(Version, LibraryMatchesTheHeaders) {
  EXPECT_STREQ(library_version(), DTRAIN_VERSION_STRING);
  EXPECT_EQ(library_version_code(), DTRAIN_VERSION_CODE);
}

TEST(Error, CarriesCodeAndMessage) {
  try {
    int n = -3;
    DTRAIN_CHECK(n > 0, Errc::invalid_argument, "count must be positive, got " << n);
    FAIL() << "no throw";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), Errc::invalid_argument);
    EXPECT_STREQ(e.what(), "count must be positive, got -3");
  }
  EXPECT_STREQ(errc_name(Errc::timeout), "timeout");
}

TEST(Error, ControlBytesOfAQuotedValueArePrinted) {
  // a NUL cut what() short; an escape sequence reached the terminal
  const char text[] = "value 'a\0b\x1b[31m'\n\tnext";
  const Error e(Errc::invalid_config, std::string(text, sizeof text - 1));
  EXPECT_STREQ(e.what(), "value 'a\\x00b\\x1b[31m'\n\tnext");
}

TEST(Env, ParsesAndValidates) {
  setenv("DTRAIN_COMM_TIMEOUT", "2.5", 1);
  setenv("DTRAIN_LOG_LEVEL", "debug", 1);
  env::reload();
  EXPECT_DOUBLE_EQ(env::params().comm_timeout_s, 2.5);
  EXPECT_EQ(env::params().log_level, log::Level::debug);
  setenv("DTRAIN_COMM_TIMEOUT", "abc", 1);
  EXPECT_THROW(env::reload(), Error);
  setenv("DTRAIN_COMM_TIMEOUT", "-1", 1);
  EXPECT_THROW(env::reload(), Error);
  setenv("DTRAIN_LOG_ALL_RANKS", "maybe", 1);
  unsetenv("DTRAIN_COMM_TIMEOUT");
  EXPECT_THROW(env::reload(), Error);
  unsetenv("DTRAIN_LOG_ALL_RANKS");
  unsetenv("DTRAIN_LOG_LEVEL");
  env::reload();
  EXPECT_DOUBLE_EQ(env::params().comm_timeout_s, 600.0);
}

// Settings are decimal text as a whole: what strtol/strtod would also take (leading spaces,
// '+', hexadecimal) is refused, and a value past the type's range is out of range.
TEST(Env, NumbersAreDecimalTextOnly) {
  const auto message = [](const char* name, auto read) {
    try {
      read(name);
      return std::string("accepted");
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), Errc::invalid_config);
      return std::string(e.what());
    }
  };
  const auto as_int = [](const char* name) { return env::get_int(name, 1, 0, 100); };
  const auto as_double = [](const char* name) { return env::get_double(name, 1, 0.001, 100); };
  const char* name = "DTRAIN_TEST_ENV_NUMBER";
  for (const char* text : {" 2", "+2", "0x10", "2 ", "2x"}) {
    setenv(name, text, 1);
    EXPECT_EQ(message(name, as_int), std::string(name) + "='" + text + "' is not an integer");
  }
  for (const char* text : {" 2.5", "+2.5", "0x1p3", "2.5 ", "abc"}) {
    setenv(name, text, 1);
    EXPECT_EQ(message(name, as_double), std::string(name) + "='" + text + "' is not a number");
  }
  setenv(name, "1e-400", 1);
  EXPECT_EQ(message(name, as_double), std::string(name) + "=1e-400 is out of range [0.001, 100]");
  setenv(name, "99999999999999999999", 1);
  EXPECT_EQ(message(name, as_int), std::string(name) + "=99999999999999999999 is out of range [0, 100]");
  setenv(name, "nan", 1);
  EXPECT_EQ(message(name, as_double), std::string(name) + "=nan is out of range [0.001, 100]");
  setenv(name, "42", 1);
  EXPECT_EQ(env::get_int(name, 1, 0, 100), 42);
  setenv(name, "2.5e1", 1);
  EXPECT_EQ(env::get_double(name, 1, 0.001, 100), 25.0);
  unsetenv(name);
  EXPECT_EQ(env::get_int(name, 7, 0, 100), 7);
}

TEST(Log, PrefixAndRankFilter) {
  log::set_rank(3, 8);
  log::set_level(log::Level::info);
  EXPECT_FALSE(log::enabled(log::Level::info));  // not rank 0
  EXPECT_TRUE(log::enabled(log::Level::error));  // errors print everywhere
  testing::internal::CaptureStderr();
  log::write(log::Level::warn, "hello");
  std::string out = testing::internal::GetCapturedStderr();
  EXPECT_EQ(out, "[dtrain r3/8] WARN hello\n");
  log::set_rank(0, 1);
  EXPECT_TRUE(log::enabled(log::Level::info));
  EXPECT_FALSE(log::enabled(log::Level::debug));
}

TEST(Buffer, AlignedGrowOnlyAndCounted) {
  std::uint64_t before = AlignedBuffer::allocation_count();
  AlignedBuffer b(1000);
  EXPECT_EQ(reinterpret_cast<std::uintptr_t>(b.data()) % AlignedBuffer::kAlignment, 0u);
  EXPECT_EQ(b.as<unsigned char>()[999], 0);  // zeroed
  EXPECT_FALSE(b.ensure(500));
  EXPECT_FALSE(b.ensure(1000));
  EXPECT_TRUE(b.ensure(5000));
  EXPECT_EQ(AlignedBuffer::allocation_count(), before + 2);
  AlignedBuffer moved = std::move(b);
  EXPECT_EQ(moved.bytes(), 5000u);
  EXPECT_TRUE(b.empty());
  EXPECT_THROW((AlignedBuffer(10, 3)), Error);
}

TEST(Timer, Monotonic) {
  Stopwatch w;
  double total = 0;
  { ScopedAccumulate acc(total); }
  EXPECT_GE(w.seconds(), 0.0);
  EXPECT_GE(total, 0.0);
}

// Settings are written in the fewest digits that read back the same, and parsed whole.
TEST(NumberText, ShortestFormReadsBackAndParsingTakesWholeNumbersOnly) {
  EXPECT_EQ(shortest_text(0.003), "0.003");
  EXPECT_EQ(shortest_text(0.95f), "0.95");
  EXPECT_EQ(shortest_text(65536.0), "65536");
  EXPECT_EQ(shortest_text(-std::nan("")), "nan");  // the sign of a NaN means nothing
  EXPECT_EQ(shortest_text(-std::numeric_limits<float>::infinity()), "-inf");
  for (double x : {0.1, 1.0 / 3.0, 3e-4, 1e-8, 6.02214076e23, -2.5}) {
    double back = 0;
    ASSERT_TRUE(parse_number(shortest_text(x), back)) << shortest_text(x);
    EXPECT_EQ(back, x) << shortest_text(x);
  }
  double v = 0;
  EXPECT_TRUE(parse_number("0.0030000000000000001", v));
  EXPECT_EQ(v, 0.003);
  for (const char* not_a_number : {"", "10x", " 1", "true", "corpus.txt", "1e"})
    EXPECT_FALSE(parse_number(not_a_number, v)) << "'" << not_a_number << "'";
  std::uint64_t w = 0;
  EXPECT_TRUE(parse_whole("9007199254740993", w));
  EXPECT_EQ(w, 9007199254740993ull);  // past 2^53: exact, where a double is not
  for (const char* not_whole : {"", "-1", "1e3", "0.5", "18446744073709551616"})
    EXPECT_FALSE(parse_whole(not_whole, w)) << "'" << not_whole << "'";
}
