// GET /: a small chat page (plain HTML and JavaScript, no build step) that streams from the API:
// /v1/chat/completions when the folder has a chat template (GET /health says), else
// /v1/completions on the raw text; temperature and max_tokens inputs, a stop button (aborts the
// fetch), errors shown. A URL fragment "#prompt=TEXT&send=1" fills the input and presses send (a
// link that asks a question). <body data-state> is idle, streaming, done or error: the headless-
// browser test (tests/serve/chat_page_test.py) waits on it.
#pragma once

namespace hh::serve {

const char* chat_page_html();

}  // namespace hh::serve
