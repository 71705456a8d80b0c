// UTF-8 and the few Unicode properties the tokenizers need. Every property, normalization and case
// mapping comes from utf8proc (data/unicode.cpp); this header does not expose it.
//
// Invalid UTF-8 is never an error here: each maximal ill-formed subsequence (Unicode §3.9, "U+FFFD
// substitution of maximal subparts") becomes one U+FFFD, exactly as Python's
// bytes.decode("utf-8", "replace") and Rust's String::from_utf8_lossy do. HF `tokenizers` takes
// Python str, so a byte string is compared with HF through this replacement.
#pragma once
#include <cstddef>
#include <string>
#include <string_view>

namespace hh::data::unicode {

constexpr char32_t kReplacement = 0xFFFD;

// The code point starting at s[i]; advances i past it (past one maximal ill-formed subpart, which
// gives kReplacement). Requires i < s.size().
char32_t next_code_point(std::string_view s, size_t& i);

// True when s is well-formed UTF-8 (surrogates, overlongs and code points above U+10FFFF are not).
bool is_valid_utf8(std::string_view s);

// s with every ill-formed subpart replaced by U+FFFD (a copy of s when it is valid).
std::string sanitize_utf8(std::string_view s);

std::u32string decode_utf8(std::string_view s);  // with replacement, as next_code_point
void append_utf8(std::string& out, char32_t cp);  // cp must be a scalar value (not a surrogate)
std::string encode_utf8(std::u32string_view s);

// Properties (general categories as in UnicodeData.txt).
bool is_letter(char32_t c);       // L*: Lu Ll Lt Lm Lo
bool is_number(char32_t c);       // N*: Nd Nl No
bool is_whitespace(char32_t c);   // the White_Space property: U+0009..U+000D, U+0085, Zs, Zl, Zp
bool is_punctuation(char32_t c);  // P*
bool is_other(char32_t c);        // C*: Cc Cf Cs Co Cn (unassigned)
bool is_nonspacing_mark(char32_t c);  // Mn

// Normalization forms D and C of valid UTF-8 (sanitize first).
std::string nfd(std::string_view s);
std::string nfc(std::string_view s);

// Full lower-case mapping of one code point, appended as UTF-8 (as Rust's char::to_lowercase,
// which HF's Lowercase normalizer applies per character: no final-sigma context).
void append_lowercase(std::string& out, char32_t c);
std::string lowercase(std::string_view s);

}  // namespace hh::data::unicode
