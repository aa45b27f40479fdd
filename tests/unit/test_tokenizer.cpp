// GPT-2's tokens as text (dtrain/train/tokenizer.hpp): its word split, byte pair merges and
// the files it reads. tests/apps/check_tokenizer.py checks whole prompts against a reference.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "dtrain/core/error.hpp"
#include "dtrain/train/tokenizer.hpp"

namespace fs = std::filesystem;
using dtrain::train::gpt2_words;
using dtrain::train::Tokenizer;
using Words = std::vector<std::string>;

namespace {

TEST(Gpt2Words, SplitsAsItsPattern) {
  EXPECT_EQ(gpt2_words("Hello world"), (Words{"Hello", " world"}));
  EXPECT_EQ(gpt2_words("it's we're I'll 'x"), (Words{"it", "'s", " we", "'re", " I", "'ll", " '", "x"}));
  EXPECT_EQ(gpt2_words("abc123 45!?"), (Words{"abc", "123", " 45", "!?"}));
  // White space: a run keeps all but its last character, which goes with the next word; a
  // lone newline stands alone; at the end the whole run.
  EXPECT_EQ(gpt2_words("a   b"), (Words{"a", "  ", " b"}));
  EXPECT_EQ(gpt2_words("a\n\nb"), (Words{"a", "\n", "\n", "b"}));
  EXPECT_EQ(gpt2_words("a \t\n c  "), (Words{"a", " \t\n", " c", "  "}));
  // White space is Unicode's White_Space, as a regular expression's \s: not the information
  // separators U+001C..U+001F (which Python's isspace counts), but U+0085 and U+00A0.
  EXPECT_EQ(gpt2_words("a \x1c" "b"), (Words{"a", " \x1c", "b"}));
  EXPECT_EQ(gpt2_words("a\xc2\xa0\xc2\xa0" "b"), (Words{"a", "\xc2\xa0", "\xc2\xa0", "b"}));
  // Unicode classes: letters of any script, numbers such as superscripts, other symbols.
  EXPECT_EQ(gpt2_words("caf\xc3\xa9 \xd0\x9c\xd0\xb8\xd1\x80"), (Words{"caf\xc3\xa9", " \xd0\x9c\xd0\xb8\xd1\x80"}));
  EXPECT_EQ(gpt2_words("x\xc2\xb2 \xf0\x9f\x99\x82!"), (Words{"x", "\xc2\xb2", " \xf0\x9f\x99\x82!"}));
  EXPECT_EQ(gpt2_words("\xe6\x9d\xb1\xe4\xba\xac" "1"), (Words{"\xe6\x9d\xb1\xe4\xba\xac", "1"}));
  // A byte that is not UTF-8 is a symbol of its own, and nothing is lost.
  EXPECT_EQ(gpt2_words("a\xff\xfe b"), (Words{"a", "\xff\xfe", " b"}));
  EXPECT_EQ(gpt2_words(""), Words{});
}

// Where gpt2_can_cut allows a cut, the two sides split into the whole text's words: checked
// at every position of random texts of the characters the pattern treats differently (white
// space of one and several bytes, letters, digits, a contraction's, CJK, bytes that are not
// UTF-8), and for windows of them that begin anywhere, as dtrain-data's reads do.
TEST(Gpt2Words, CutsWhereTheWordsDoNotChange) {
  const std::vector<std::string> alphabet = {" ", " ", "\n", "\n", "\r", "\t", "a", "Z", "1", "'", "s", "!",
                                             "\xc3\xa9", "\xc2\xa0", "\xc2\x85", "\xe3\x80\x80", "\xe3\x80\x82",
                                             "\xe6\x9d\xb1", "\xff", "\x80", "\xe3\x80"};
  std::uint64_t state = 42;
  int cuts = 0;
  for (int text_index = 0; text_index < 20000; ++text_index) {
    std::string text;
    for (int k = 0; k < 12; ++k) {
      state = state * 6364136223846793005ULL + 1442695040888963407ULL;
      text += alphabet[(state >> 33) % alphabet.size()];
    }
    const Words whole = gpt2_words(text);
    const auto check = [&](std::size_t p) {
      Words parts = gpt2_words(text.substr(0, p));
      const Words rest = gpt2_words(text.substr(p));
      parts.insert(parts.end(), rest.begin(), rest.end());
      return parts == whole;
    };
    // Windows that begin anywhere, and windows that end anywhere (a block's end).
    for (std::size_t from = 0; from < text.size(); ++from) {
      const std::string window = text.substr(from);
      for (std::size_t p = 0; p <= window.size(); ++p) {
        if (!dtrain::train::gpt2_can_cut(window, p)) continue;
        if (from == 0) ++cuts;
        ASSERT_TRUE(check(from + p)) << "cut at " << from + p << " of '" << text << "' (a window from " << from << ")";
      }
    }
    for (std::size_t to = 1; to < text.size(); ++to) {
      const std::string window = text.substr(0, to);
      for (std::size_t p = 0; p <= window.size(); ++p) {
        if (dtrain::train::gpt2_can_cut(window, p)) ASSERT_TRUE(check(p)) << "cut at " << p << " of '" << text << "' (a window to " << to << ")";
      }
    }
  }
  EXPECT_GT(cuts, 10000);
  EXPECT_TRUE(dtrain::train::gpt2_can_cut("x.\nab", 3));
  EXPECT_TRUE(dtrain::train::gpt2_can_cut("x\r\nab", 2));                    // CRLF: between \r and \n
  EXPECT_TRUE(dtrain::train::gpt2_can_cut("\xe3\x80\x82\n\xe6\x9d\xb1", 4));  // CJK lines
  EXPECT_FALSE(dtrain::train::gpt2_can_cut("x\r\nab", 3));                   // after it, the run would differ
  EXPECT_FALSE(dtrain::train::gpt2_can_cut("x \nab", 3));
  EXPECT_FALSE(dtrain::train::gpt2_can_cut("x\xc2\xa0\nab", 4));            // NBSP before the newline
  EXPECT_FALSE(dtrain::train::gpt2_can_cut("\xa0\nab", 2));                  // where that character begins is not shown
  EXPECT_FALSE(dtrain::train::gpt2_can_cut("x\n\xc2", 2));                    // nor where the one after it ends (NBSP?)
  EXPECT_FALSE(dtrain::train::gpt2_can_cut("x. ab", 3));                      // " ab" is one word
  EXPECT_FALSE(dtrain::train::gpt2_can_cut("x.\n", 3));
}

class TokenizerFiles : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("dtrain_tok_" + std::to_string(::getpid()));
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  void write(const std::string& name, const std::string& text) { std::ofstream(dir_ / name, std::ios::binary) << text; }
  fs::path dir_;
};

TEST_F(TokenizerFiles, MergesPairsByRankAndDecodesBytes) {
  // GPT-2's characters: "\xc4\xa0" (U+0120) is the space byte, "\xc4\x8a" (U+010A) newline.
  write("vocab.json", R"({"a":0,"b":1,"c":2,"\u0120":3,"\u010a":4,"ab":5,"abc":6,"\u0120a":7,"bc":8})");
  write("merges.txt", "#version: 0.2\na b\nab c\n\xc4\xa0 a\nb c\n");
  const Tokenizer t(dir_.string());
  EXPECT_TRUE(t.encodes());
  EXPECT_EQ(t.size(), 9);
  EXPECT_EQ(t.bytes(3), " ");
  EXPECT_EQ(t.bytes(4), "\n");
  EXPECT_EQ(t.bytes(7), " a");
  EXPECT_EQ(t.bytes(99), "");
  EXPECT_EQ(t.id(" a"), 7);
  EXPECT_EQ(t.id("<|endoftext|>"), -1);
  // "abc": a+b first (rank 0), then ab+c. In " abc" a+b (rank 0) also comes before space+a
  // (rank 2), so the space stays alone; in " ac" space+a is the first merge there is.
  EXPECT_EQ(t.encode("abc"), (std::vector<std::int32_t>{6}));
  EXPECT_EQ(t.encode("c abc"), (std::vector<std::int32_t>{2, 3, 6}));
  EXPECT_EQ(t.encode("c ac"), (std::vector<std::int32_t>{2, 7, 2}));
  EXPECT_EQ(t.encode("bc"), (std::vector<std::int32_t>{8}));
  EXPECT_EQ(t.encode("\n"), (std::vector<std::int32_t>{4}));
  try {  // no token for the byte: this text cannot be encoded (a usage error, status 2)
    t.encode("z");
    ADD_FAILURE() << "a byte without a token was encoded";
  } catch (const dtrain::Error& e) {
    EXPECT_EQ(e.code(), dtrain::Errc::invalid_config);
    EXPECT_NE(std::string(e.what()).find("has no token for the byte 122"), std::string::npos) << e.what();
  }
}

TEST_F(TokenizerFiles, WithoutMergesItDecodesOnly) {
  write("vocab.json", R"({"a":0,"b":1})");
  const Tokenizer t((dir_ / "vocab.json").string());
  EXPECT_FALSE(t.encodes());
  EXPECT_EQ(t.bytes(1), "b");
  EXPECT_THROW(t.encode("ab"), dtrain::Error);
}

TEST_F(TokenizerFiles, RefusesWhatIsNotATokenizer) {
  for (const std::string& bad : {std::string("[1, 2]"), std::string("{}"), std::string(R"({"a": -1})"),
                                 std::string(R"({"\u0100\u4e00": 0})"), std::string(R"({"a": 99999999})")}) {
    write("vocab.json", bad);
    EXPECT_THROW(Tokenizer{dir_.string()}, dtrain::Error) << bad;
  }
  write("vocab.json", R"({"a":0,"b":40})");  // 2 tokens: ids below 32 (16 slots a token)
  try {
    Tokenizer{dir_.string()};
    ADD_FAILURE() << "a sparse vocab.json was taken";
  } catch (const dtrain::Error& e) {
    EXPECT_NE(std::string(e.what()).find("id 40 of 'b' is out of range (a vocab.json of 2 tokens has ids below 32)"),
              std::string::npos) << e.what();
  }
  write("vocab.json", R"({"a":0,"b":1})");
  write("merges.txt", "#version: 0.2\na b c\n");
  EXPECT_THROW(Tokenizer{dir_.string()}, dtrain::Error);
  write("merges.txt", "#version: 0.2\na b\n");  // makes "ab", which vocab.json does not have: decodes only
  const Tokenizer mismatched(dir_.string());
  EXPECT_FALSE(mismatched.encodes());
  EXPECT_NE(mismatched.describe().find("does not have"), std::string::npos) << mismatched.describe();
  EXPECT_EQ(mismatched.bytes(1), "b");
  EXPECT_THROW(Tokenizer{(dir_ / "missing.json").string()}, dtrain::Error);
}

}  // namespace
