#include "data/unicode.h"

#include <utf8proc.h>

#include <cstdlib>
#include <memory>
#include "core/error.h"

namespace hh::data::unicode {

char32_t next_code_point(std::string_view s, size_t& i) {
  const auto byte = [&](size_t k) { return static_cast<unsigned char>(s[k]); };
  const unsigned char b0 = byte(i);
  if (b0 < 0x80) {
    ++i;
    return b0;
  }
  // Length and the allowed range of the second byte for each lead byte (Unicode Table 3-7);
  // every later byte is 80..BF.
  int len = 0;
  unsigned char lo = 0x80, hi = 0xBF;
  if (b0 >= 0xC2 && b0 <= 0xDF) {
    len = 2;
  } else if (b0 >= 0xE0 && b0 <= 0xEF) {
    len = 3;
    if (b0 == 0xE0) lo = 0xA0;
    if (b0 == 0xED) hi = 0x9F;
  } else if (b0 >= 0xF0 && b0 <= 0xF4) {
    len = 4;
    if (b0 == 0xF0) lo = 0x90;
    if (b0 == 0xF4) hi = 0x8F;
  } else {
    ++i;  // a continuation byte, C0, C1 or F5..FF: never part of a well-formed sequence
    return kReplacement;
  }
  char32_t cp = b0 & (0xFF >> (len + 1));
  size_t k = i + 1;
  for (int n = 1; n < len; ++n, ++k) {
    const unsigned char lower = n == 1 ? lo : 0x80, upper = n == 1 ? hi : 0xBF;
    if (k >= s.size() || byte(k) < lower || byte(k) > upper) {
      i = k;  // the maximal subpart so far becomes one U+FFFD; byte k starts afresh
      return kReplacement;
    }
    cp = (cp << 6) | (byte(k) & 0x3F);
  }
  i = k;
  return cp;
}

bool is_valid_utf8(std::string_view s) {
  for (size_t i = 0; i < s.size();) {
    if (static_cast<unsigned char>(s[i]) < 0x80) {
      ++i;
      continue;
    }
    const size_t start = i;
    const char32_t c = next_code_point(s, i);
    // A U+FFFD that was really in the text is three bytes EF BF BD; a replacement is not.
    if (c == kReplacement && !(i - start == 3 && s.compare(start, 3, "\xEF\xBF\xBD") == 0)) return false;
  }
  return true;
}

void append_utf8(std::string& out, char32_t cp) {
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

std::string sanitize_utf8(std::string_view s) {
  if (is_valid_utf8(s)) return std::string(s);
  std::string out;
  out.reserve(s.size() + 8);
  for (size_t i = 0; i < s.size();) append_utf8(out, next_code_point(s, i));
  return out;
}

std::u32string decode_utf8(std::string_view s) {
  std::u32string out;
  out.reserve(s.size());
  for (size_t i = 0; i < s.size();) out += next_code_point(s, i);
  return out;
}

std::string encode_utf8(std::u32string_view s) {
  std::string out;
  out.reserve(s.size());
  for (char32_t c : s) append_utf8(out, c);
  return out;
}

namespace {
utf8proc_category_t category(char32_t c) {
  return utf8proc_category(static_cast<utf8proc_int32_t>(c));
}
}  // namespace

bool is_letter(char32_t c) {
  if (c < 0x80) return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z');
  const auto k = category(c);
  return k >= UTF8PROC_CATEGORY_LU && k <= UTF8PROC_CATEGORY_LO;
}

bool is_number(char32_t c) {
  if (c < 0x80) return c >= '0' && c <= '9';
  const auto k = category(c);
  return k >= UTF8PROC_CATEGORY_ND && k <= UTF8PROC_CATEGORY_NO;
}

bool is_whitespace(char32_t c) {
  if (c < 0x80) return c == ' ' || (c >= 0x09 && c <= 0x0D);
  if (c == 0x85) return true;
  const auto k = category(c);
  return k == UTF8PROC_CATEGORY_ZS || k == UTF8PROC_CATEGORY_ZL || k == UTF8PROC_CATEGORY_ZP;
}

bool is_punctuation(char32_t c) {
  const auto k = category(c);
  return k >= UTF8PROC_CATEGORY_PC && k <= UTF8PROC_CATEGORY_PO;
}

bool is_other(char32_t c) {
  const auto k = category(c);
  return k == UTF8PROC_CATEGORY_CN || (k >= UTF8PROC_CATEGORY_CC && k <= UTF8PROC_CATEGORY_CO);
}

bool is_nonspacing_mark(char32_t c) { return category(c) == UTF8PROC_CATEGORY_MN; }

namespace {
std::string map(std::string_view s, int options) {
  if (s.empty()) return {};
  utf8proc_uint8_t* out = nullptr;
  const utf8proc_ssize_t n = utf8proc_map(reinterpret_cast<const utf8proc_uint8_t*>(s.data()),
                                          static_cast<utf8proc_ssize_t>(s.size()), &out,
                                          static_cast<utf8proc_option_t>(options));
  std::unique_ptr<utf8proc_uint8_t, decltype(&std::free)> owned(out, &std::free);
  if (n < 0) hh::fail(std::string("unicode normalization: ") + utf8proc_errmsg(n));
  return std::string(reinterpret_cast<const char*>(out), static_cast<size_t>(n));
}
}  // namespace

std::string nfd(std::string_view s) { return map(s, UTF8PROC_STABLE | UTF8PROC_DECOMPOSE); }
std::string nfc(std::string_view s) { return map(s, UTF8PROC_STABLE | UTF8PROC_COMPOSE); }

void append_lowercase(std::string& out, char32_t c) {
  if (c < 0x80) {
    out += static_cast<char>(c >= 'A' && c <= 'Z' ? c + 32 : c);
  } else if (c == 0x130) {
    // The one unconditional multi-character lower-case mapping (SpecialCasing.txt): İ -> i +
    // combining dot above. utf8proc gives simple (1:1) mappings only.
    out += "i\xCC\x87";
  } else {
    append_utf8(out, static_cast<char32_t>(utf8proc_tolower(static_cast<utf8proc_int32_t>(c))));
  }
}

std::string lowercase(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  for (size_t i = 0; i < s.size();) append_lowercase(out, next_code_point(s, i));
  return out;
}

}  // namespace hh::data::unicode
