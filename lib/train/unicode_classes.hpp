#pragma once
// The classes of code points that GPT-2's tokenizer splits text into words by (its pattern's
// \p{L}, \p{N} and \s), from Unicode's tables (unicode_classes.cpp is generated).
namespace dtrain::train {

enum class CharClass { letter, number, space, other };

CharClass char_class(char32_t c);

}  // namespace dtrain::train
