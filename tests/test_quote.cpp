// quote_text (core/quote.h): input text quoted in error messages, control bytes and invalid UTF-8
// escaped, long text cut.
#include <doctest/doctest.h>

#include <string>

#include "core/quote.h"

TEST_CASE("quote_text: printable text and UTF-8 as they are, binary escaped, long text cut") {
  using hh::quote_text;
  CHECK(quote_text("abc") == "'abc'");
  CHECK(quote_text("caf\xC3\xA9 \xE2\x82\xAC \xF0\x9F\x98\x80") == "'caf\xC3\xA9 \xE2\x82\xAC \xF0\x9F\x98\x80'");
  CHECK(quote_text(std::string("a\0b", 3)) == "'a\\x00b'");
  CHECK(quote_text("\x1b[2J\t\x7f") == "'\\x1B[2J\\x09\\x7F'");
  CHECK(quote_text("\xff\xfe") == "'\\xFF\\xFE'");
  CHECK(quote_text("\xC3") == "'\\xC3'");                  // a sequence cut short
  CHECK(quote_text("\xC0\xAF") == "'\\xC0\\xAF'");          // overlong '/'
  CHECK(quote_text("\xED\xA0\x80") == "'\\xED\\xA0\\x80'");  // a UTF-16 surrogate
  CHECK(quote_text("abcdef", 3) == "'abc...'");
  CHECK(quote_text("abc", 3) == "'abc'");
}
