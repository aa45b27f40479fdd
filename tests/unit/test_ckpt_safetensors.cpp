// Reading what other tools wrote: the JSON of safetensors headers and config.json
// (ckpt/json_value.hpp), and safetensors files themselves (ckpt/safetensors_file.hpp).
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <functional>
#include <fstream>
#include <limits>
#include <string>
#include <vector>

#include "core/json_value.hpp"
#include "ckpt/safetensors_file.hpp"
#include "dtrain/core/dtype.hpp"
#include "dtrain/core/error.hpp"

namespace fs = std::filesystem;
namespace json = dtrain::json;
using dtrain::Errc;
using dtrain::Error;
using dtrain::ckpt::SafetensorsFile;

namespace {

Errc code_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.code();
  }
  return Errc::ok;
}

TEST(Json, ParsesNestedValuesInOrder) {
  const json::Value v = json::parse(
      R"( {"b": [1, -2.5e3, true, false, null], "a": {"s": "x\"\\\/\n\u00e9\ud83d\ude00"}} )", "test");
  ASSERT_EQ(v.kind, json::Value::Kind::object);
  ASSERT_EQ(v.members.size(), 2u);
  EXPECT_EQ(v.members[0].first, "b");  // file order
  const json::Value& b = *v.find("b");
  ASSERT_EQ(b.items.size(), 5u);
  EXPECT_EQ(json::to_u64(b.items[0], "b0"), 1u);
  EXPECT_DOUBLE_EQ(json::to_double(b.items[1], "b1"), -2500.0);
  EXPECT_TRUE(b.items[2].boolean);
  EXPECT_EQ(b.items[3].kind, json::Value::Kind::boolean);
  EXPECT_FALSE(b.items[3].boolean);
  EXPECT_EQ(b.items[4].kind, json::Value::Kind::null);
  EXPECT_EQ(v.find("a")->find("s")->text, "x\"\\/\n\xc3\xa9\xf0\x9f\x98\x80");
  EXPECT_EQ(v.find("missing"), nullptr);
}

TEST(Json, KeepsSixtyFourBitOffsetsExact) {
  const json::Value v = json::parse("[18446744073709551615, 9007199254740993]", "test");
  EXPECT_EQ(json::to_u64(v.items[0], "max"), std::numeric_limits<std::uint64_t>::max());
  EXPECT_EQ(json::to_u64(v.items[1], "2^53+1"), 9007199254740993ull);  // a double would lose it
  EXPECT_EQ(code_of([] { json::to_u64(json::parse("18446744073709551616", "t"), "2^64"); }), Errc::corrupt_data);
  EXPECT_EQ(code_of([] { json::to_u64(json::parse("-1", "t"), "negative"); }), Errc::corrupt_data);
  EXPECT_EQ(code_of([] { json::to_u64(json::parse("1.0", "t"), "fraction"); }), Errc::corrupt_data);
}

TEST(Json, RefusesMalformedTextNamingWhereItStopped) {
  for (const char* bad : {"", "{", "{\"a\" 1}", "[1,]", "[1] x", "\"abc", "\"\\q\"", "01x", "tru", "{\"a\":-}",
                          "\"a\nb\""}) {
    EXPECT_EQ(code_of([&] { json::parse(bad, "t"); }), Errc::corrupt_data) << bad;
  }
  try {
    json::parse("[1, 2 3]", "the header");
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("the header: expected ']' at byte 6"), std::string::npos) << e.what();
  }
  EXPECT_EQ(code_of([] { json::parse(std::string(65, '[') + std::string(65, ']'), "t"); }), Errc::corrupt_data);
  EXPECT_NO_THROW(json::parse(std::string(64, '[') + std::string(64, ']'), "t"));
}

class Safetensors : public ::testing::Test {
 protected:
  void SetUp() override {
    path_ = (fs::temp_directory_path() / ("dtrain_st_" + std::to_string(::getpid()) + ".safetensors")).string();
  }
  void TearDown() override { fs::remove(path_); }

  // header text padded as the format wants, then the data bytes
  void write(const std::string& header, const std::vector<unsigned char>& data, std::uint64_t claimed_length = 0) {
    std::ofstream f(path_, std::ios::binary);
    const std::uint64_t n = claimed_length ? claimed_length : header.size();
    for (int i = 0; i < 8; ++i) f.put(static_cast<char>(n >> (8 * i)));
    f << header;
    f.write(reinterpret_cast<const char*>(data.data()), static_cast<std::streamsize>(data.size()));
  }
  static void put(std::vector<unsigned char>& out, std::uint64_t word, int bytes) {
    for (int i = 0; i < bytes; ++i) out.push_back(static_cast<unsigned char>(word >> (8 * i)));
  }
  std::string path_;
};

TEST_F(Safetensors, ReadsEveryFloatTypeAsFp32) {
  std::vector<unsigned char> d;
  put(d, dtrain::float_bits(1.5f), 4);
  put(d, dtrain::float_bits(-2.0f), 4);
  put(d, dtrain::f32_to_bf16_bits(3.0f), 2);
  put(d, dtrain::f32_to_f16_bits(0.25f), 2);
  double big = 1e300, third = 1.0 / 3;
  std::uint64_t bits;
  std::memcpy(&bits, &third, 8);
  put(d, bits, 8);
  std::memcpy(&bits, &big, 8);
  put(d, bits, 8);
  put(d, 7, 4);
  write(R"({"__metadata__":{"format":"pt","heads":"12"},)"
        R"("a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
        R"("b":{"dtype":"BF16","shape":[1,1],"data_offsets":[8,10]},)"
        R"("c":{"dtype":"F16","shape":[1],"data_offsets":[10,12]},)"
        R"("d":{"dtype":"F64","shape":[2],"data_offsets":[12,28]},)"
        R"("i":{"dtype":"I32","shape":[],"data_offsets":[28,32]}})",
        d);
  const SafetensorsFile f(path_);
  ASSERT_EQ(f.tensors().size(), 5u);
  ASSERT_EQ(f.metadata().size(), 2u);
  EXPECT_EQ(f.metadata()[1].second, "12");
  EXPECT_EQ(f.read(*f.find("a")), (std::vector<float>{1.5f, -2.0f}));
  EXPECT_EQ(f.find("b")->shape, (std::vector<std::uint64_t>{1, 1}));
  EXPECT_EQ(f.read(*f.find("b")), std::vector<float>{3.0f});
  EXPECT_EQ(f.read(*f.find("c")), std::vector<float>{0.25f});
  const std::vector<float> dd = f.read(*f.find("d"));
  EXPECT_EQ(dd[0], static_cast<float>(third));
  EXPECT_TRUE(std::isinf(dd[1]) && dd[1] > 0);  // beyond fp32: infinite, which --init-from refuses
  EXPECT_EQ(code_of([&] { f.read(*f.find("i")); }), Errc::invalid_argument);
  EXPECT_EQ(f.find("missing"), nullptr);
}

TEST_F(Safetensors, RefusesHeadersTheFileCannotHold) {
  const std::vector<unsigned char> four(4, 0);
  const std::string ok = R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}})";
  write(ok, four);
  EXPECT_NO_THROW(SafetensorsFile{path_});
  struct Case {
    std::string header;
    std::uint64_t claimed;
  };
  for (const Case& c : std::vector<Case>{
           {ok, 1000},                                                           // length past the end
           {R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,8]}})", 0},     // data past the end
           {R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,4]}})", 0},     // bytes != shape
           {R"({"a":{"dtype":"F33","shape":[1],"data_offsets":[0,4]}})", 0},     // unknown dtype
           {R"({"a":{"dtype":"F32","shape":[1]}})", 0},                          // no offsets
           {R"({"a":{"dtype":"F32","shape":[4294967296,4294967296],"data_offsets":[0,4]}})", 0},  // overflow
           {R"({"a":{"dtype":"F32","shape":[16,1152921504606846976],"data_offsets":[0,0]}})", 0},  // wraps to 0
           {R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[4,0]}})", 0},     // reversed
           {R"({"__metadata__":{"n":1}})", 0},                                   // metadata not strings
           {R"([1])", 0},                                                        // not an object
       }) {
    write(c.header, four, c.claimed);
    EXPECT_EQ(code_of([&] { SafetensorsFile{path_}; }), Errc::corrupt_data) << c.header;
  }
  fs::remove(path_);
  EXPECT_EQ(code_of([&] { SafetensorsFile{path_}; }), Errc::io);
}

TEST_F(Safetensors, AHostileHeaderCostsNeitherMemoryNorDescriptors) {
  // A million values fit in a few MB of header but would take ~100 bytes each parsed.
  std::string header = R"({"a":{"dtype":"F32","shape":[)";
  for (int i = 0; i < (1 << 20); ++i) header += "0,";
  header += R"(0],"data_offsets":[0,0]}})";
  write(header, {});
  const auto open_descriptors = [] {
    return std::distance(fs::directory_iterator("/proc/self/fd"), fs::directory_iterator{});
  };
  const auto before = open_descriptors();
  for (int i = 0; i < 3; ++i) EXPECT_EQ(code_of([&] { SafetensorsFile{path_}; }), Errc::corrupt_data);
  EXPECT_EQ(open_descriptors(), before);  // closed although the constructor threw
}

}  // namespace
