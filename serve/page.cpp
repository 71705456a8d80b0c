#include "serve/page.h"

namespace hh::serve {

const char* chat_page_html() {
  return R"HTML(<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>hh_serve</title>
<style>
  body { font: 15px/1.45 system-ui, sans-serif; max-width: 52rem; margin: 1.5rem auto; padding: 0 1rem; color: #222; }
  h1 { font-size: 1.15rem; margin: 0 0 .8rem; }
  #log { border: 1px solid #ccc; border-radius: 6px; padding: .6rem .8rem; min-height: 12rem; white-space: pre-wrap; }
  .user { color: #135; font-weight: 600; margin-top: .5rem; }
  .assistant { margin-bottom: .5rem; }
  .error { color: #a00; }
  #bar { display: flex; gap: .5rem; margin-top: .6rem; align-items: flex-start; }
  #prompt { flex: 1; min-height: 3.2rem; font: inherit; }
  #settings { margin-top: .4rem; color: #555; font-size: .9rem; }
  #settings input { width: 4.5rem; }
</style>
</head>
<body data-state="idle">
<h1>hh_serve · <span id="model">…</span> <small id="mode"></small></h1>
<div id="log"></div>
<div id="bar">
  <textarea id="prompt" placeholder="Type a message; Enter sends, Shift+Enter breaks the line"></textarea>
  <button id="send">Send</button>
  <button id="stop" disabled>Stop</button>
</div>
<div id="settings">
  temperature <input id="temperature" type="number" min="0" max="2" step="0.1" value="0">
  max_tokens <input id="max_tokens" type="number" min="1" value="64">
</div>
<script>
"use strict";
const $ = (id) => document.getElementById(id);
const history = [];     // the conversation, when the model has a chat template
let chat = false;       // /v1/chat/completions (else /v1/completions on the raw text)
let controller = null;  // the running request's AbortController

function line(cls, text) {
  const d = document.createElement("div");
  d.className = cls;
  d.textContent = text;
  $("log").appendChild(d);
  return d;
}

async function init() {
  try {
    const h = await (await fetch("/health")).json();
    $("model").textContent = h.model;
    chat = !!h.chat_template;
    $("mode").textContent = chat ? "(chat template)" : "(no chat template: text completion)";
  } catch (e) {
    line("error", "cannot reach the server: " + e);
  }
  const args = new URLSearchParams(location.hash.slice(1));
  if (args.has("prompt")) {
    $("prompt").value = args.get("prompt");
    if (args.has("max_tokens")) $("max_tokens").value = args.get("max_tokens");
    if (args.get("send") === "1") $("send").click();
  }
}

async function send() {
  const text = $("prompt").value;
  if (!text || controller) return;
  $("prompt").value = "";
  line("user", text);
  const out = line("assistant", "");
  const body = {
    max_tokens: parseInt($("max_tokens").value, 10) || 64,
    temperature: parseFloat($("temperature").value) || 0,
    stream: true,
  };
  let url;
  if (chat) {
    history.push({ role: "user", content: text });
    body.messages = history.slice();
    url = "/v1/chat/completions";
  } else {
    body.prompt = text;
    url = "/v1/completions";
  }
  controller = new AbortController();
  $("send").disabled = true;
  $("stop").disabled = false;
  document.body.dataset.state = "streaming";
  let state = "done";
  try {
    const res = await fetch(url, {
      method: "POST", headers: { "Content-Type": "application/json" },
      body: JSON.stringify(body), signal: controller.signal,
    });
    if (!res.ok) {
      const e = await res.json().catch(() => ({}));
      throw new Error((e.error && e.error.message) || ("HTTP " + res.status));
    }
    const reader = res.body.getReader();
    const decoder = new TextDecoder();
    let buffer = "";
    for (;;) {
      const { value, done } = await reader.read();
      if (done) break;
      buffer += decoder.decode(value, { stream: true });
      let at;
      while ((at = buffer.indexOf("\n\n")) >= 0) {
        const event = buffer.slice(0, at);
        buffer = buffer.slice(at + 2);
        if (!event.startsWith("data: ") || event === "data: [DONE]") continue;
        const j = JSON.parse(event.slice(6));
        if (j.error) throw new Error(j.error.message);
        const c = j.choices && j.choices[0];
        if (!c) continue;
        out.textContent += chat ? (c.delta && c.delta.content) || "" : c.text || "";
      }
    }
    if (chat) history.push({ role: "assistant", content: out.textContent });
  } catch (e) {
    if (e.name !== "AbortError") {
      line("error", String(e.message || e));
      state = "error";
    }
  } finally {
    controller = null;
    $("send").disabled = false;
    $("stop").disabled = true;
    document.body.dataset.state = state;
  }
}

$("send").addEventListener("click", send);
$("stop").addEventListener("click", () => controller && controller.abort());
$("prompt").addEventListener("keydown", (e) => {
  if (e.key === "Enter" && !e.shiftKey) {
    e.preventDefault();
    send();
  }
});
init();
</script>
</body>
</html>
)HTML";
}

}  // namespace hh::serve
