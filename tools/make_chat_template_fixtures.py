#!/usr/bin/env python3
"""Writes tests/fixtures/chat_templates/cases.json: chat templates of the families the importer reads,
conversations, and what transformers renders for each (transformers.utils.chat_template_utils.
render_jinja_template, the function apply_chat_template(tokenize=False) calls: jinja2's
ImmutableSandboxedEnvironment with trim_blocks and lstrip_blocks), with add_generation_prompt true
and false, or the error the template raises.

The templates are the chat_template strings of these families' tokenizer_config.json files
(Llama 2 chat, Llama 3.2 Instruct, Qwen2.5 Instruct, Mistral Instruct v0.1), transcribed; Llama 3.2's
text was checked against a public copy of it. The renderer under test (serve/jinja*.cpp) must give
the same bytes. A fixed date_string is passed, as transformers lets callers do, so Llama 3's
"Today Date" does not depend on the day the script ran.

    python3 tools/make_chat_template_fixtures.py   # rewrites the fixture
"""
import json
import os

from transformers.utils.chat_template_utils import render_jinja_template

LLAMA2 = (
    "{% if messages[0]['role'] == 'system' %}{% set loop_messages = messages[1:] %}{% set system_message = "
    "messages[0]['content'] %}{% else %}{% set loop_messages = messages %}{% set system_message = false %}{% endif %}"
    "{% for message in loop_messages %}{% if (message['role'] == 'user') != (loop.index0 % 2 == 0) %}"
    "{{ raise_exception('Conversation roles must alternate user/assistant/user/assistant/...') }}{% endif %}"
    "{% if loop.index0 == 0 and system_message != false %}{% set content = '<<SYS>>\\n' + system_message + "
    "'\\n<</SYS>>\\n\\n' + message['content'] %}{% else %}{% set content = message['content'] %}{% endif %}"
    "{% if message['role'] == 'user' %}{{ bos_token + '[INST] ' + content.strip() + ' [/INST]' }}"
    "{% elif message['role'] == 'assistant' %}{{ ' '  + content.strip() + ' ' + eos_token }}{% endif %}{% endfor %}")

MISTRAL = (
    "{{ bos_token }}{% for message in messages %}{% if (message['role'] == 'user') != (loop.index0 % 2 == 0) %}"
    "{{ raise_exception('Conversation roles must alternate user/assistant/user/assistant/...') }}{% endif %}"
    "{% if message['role'] == 'user' %}{{ '[INST] ' + message['content'] + ' [/INST]' }}"
    "{% elif message['role'] == 'assistant' %}{{ message['content'] + eos_token}}"
    "{% else %}{{ raise_exception('Only user and assistant roles are supported!') }}{% endif %}{% endfor %}")

LLAMA32 = """{{- bos_token }}
{%- if custom_tools is defined %}
    {%- set tools = custom_tools %}
{%- endif %}
{%- if not tools_in_user_message is defined %}
    {%- set tools_in_user_message = true %}
{%- endif %}
{%- if not date_string is defined %}
    {%- if strftime_now is defined %}
        {%- set date_string = strftime_now("%d %b %Y") %}
    {%- else %}
        {%- set date_string = "26 Jul 2024" %}
    {%- endif %}
{%- endif %}
{%- if not tools is defined %}
    {%- set tools = none %}
{%- endif %}

{#- This block extracts the system message, so we can slot it into the right place. #}
{%- if messages[0]['role'] == 'system' %}
    {%- set system_message = messages[0]['content']|trim %}
    {%- set messages = messages[1:] %}
{%- else %}
    {%- set system_message = "" %}
{%- endif %}

{#- System message #}
{{- "<|start_header_id|>system<|end_header_id|>\\n\\n" }}
{%- if tools is not none %}
    {{- "Environment: ipython\\n" }}
{%- endif %}
{{- "Cutting Knowledge Date: December 2023\\n" }}
{{- "Today Date: " + date_string + "\\n\\n" }}
{%- if tools is not none and not tools_in_user_message %}
    {{- "You have access to the following functions. To call a function, please respond with JSON for a function call." }}
    {{- 'Respond in the format {"name": function name, "parameters": dictionary of argument name and its value}.' }}
    {{- "Do not use variables.\\n\\n" }}
    {%- for t in tools %}
        {{- t | tojson(indent=4) }}
        {{- "\\n\\n" }}
    {%- endfor %}
{%- endif %}
{{- system_message }}
{{- "<|eot_id|>" }}

{#- Custom tools are passed in a user message with some extra guidance #}
{%- if tools_in_user_message and not tools is none %}
    {#- Extract the first user message so we can plug it in here #}
    {%- if messages | length != 0 %}
        {%- set first_user_message = messages[0]['content']|trim %}
        {%- set messages = messages[1:] %}
    {%- else %}
        {{- raise_exception("Cannot put tools in the first user message when there's no first user message!") }}
{%- endif %}
    {{- '<|start_header_id|>user<|end_header_id|>\\n\\n' -}}
    {{- "Given the following functions, please respond with a JSON for a function call " }}
    {{- "with its proper arguments that best answers the given prompt.\\n\\n" }}
    {{- 'Respond in the format {"name": function name, "parameters": dictionary of argument name and its value}.' }}
    {{- "Do not use variables.\\n\\n" }}
    {%- for t in tools %}
        {{- t | tojson(indent=4) }}
        {{- "\\n\\n" }}
    {%- endfor %}
    {{- first_user_message + "<|eot_id|>"}}
{%- endif %}

{%- for message in messages %}
    {%- if not (message.role == 'ipython' or message.role == 'tool' or 'tool_calls' in message) %}
        {{- '<|start_header_id|>' + message['role'] + '<|end_header_id|>\\n\\n'+ message['content'] | trim + '<|eot_id|>' }}
    {%- elif 'tool_calls' in message %}
        {%- if not message.tool_calls|length == 1 %}
            {{- raise_exception("This model only supports single tool-calls at once!") }}
        {%- endif %}
        {%- set tool_call = message.tool_calls[0].function %}
        {{- '<|start_header_id|>assistant<|end_header_id|>\\n\\n' -}}
        {{- '{"name": "' + tool_call.name + '", ' }}
        {{- '"parameters": ' }}
        {{- tool_call.arguments | tojson }}
        {{- "}" }}
        {{- "<|eot_id|>" }}
    {%- elif message.role == "tool" or message.role == "ipython" %}
        {{- "<|start_header_id|>ipython<|end_header_id|>\\n\\n" }}
        {%- if message.content is mapping or message.content is iterable %}
            {{- message.content | tojson }}
        {%- else %}
            {{- message.content }}
        {%- endif %}
        {{- "<|eot_id|>" }}
    {%- endif %}
{%- endfor %}
{%- if add_generation_prompt %}
    {{- '<|start_header_id|>assistant<|end_header_id|>\\n\\n' }}
{%- endif %}
"""

QWEN25 = """{%- if tools %}
    {{- '<|im_start|>system\\n' }}
    {%- if messages[0]['role'] == 'system' %}
        {{- messages[0]['content'] }}
    {%- else %}
        {{- 'You are Qwen, created by Alibaba Cloud. You are a helpful assistant.' }}
    {%- endif %}
    {{- "\\n\\n# Tools\\n\\nYou may call one or more functions to assist with the user query.\\n\\nYou are provided with function signatures within <tools></tools> XML tags:\\n<tools>" }}
    {%- for tool in tools %}
        {{- "\\n" }}
        {{- tool | tojson }}
    {%- endfor %}
    {{- "\\n</tools>\\n\\nFor each function call, return a json object with function name and arguments within <tool_call></tool_call> XML tags:\\n<tool_call>\\n{\\"name\\": <function-name>, \\"arguments\\": <args-json-object>}\\n</tool_call><|im_end|>\\n" }}
{%- else %}
    {%- if messages[0]['role'] == 'system' %}
        {{- '<|im_start|>system\\n' + messages[0]['content'] + '<|im_end|>\\n' }}
    {%- else %}
        {{- '<|im_start|>system\\nYou are Qwen, created by Alibaba Cloud. You are a helpful assistant.<|im_end|>\\n' }}
    {%- endif %}
{%- endif %}
{%- for message in messages %}
    {%- if (message.role == "user") or (message.role == "system" and not loop.first) or (message.role == "assistant" and not message.tool_calls) %}
        {{- '<|im_start|>' + message.role + '\\n' + message.content + '<|im_end|>' + '\\n' }}
    {%- elif message.role == "assistant" %}
        {{- '<|im_start|>' + message.role }}
        {%- if message.content %}
            {{- '\\n' + message.content }}
        {%- endif %}
        {%- for tool_call in message.tool_calls %}
            {%- if tool_call.function is defined %}
                {%- set tool_call = tool_call.function %}
            {%- endif %}
            {{- '\\n<tool_call>\\n{"name": "' }}
            {{- tool_call.name }}
            {{- '", "arguments": ' }}
            {{- tool_call.arguments | tojson }}
            {{- '}\\n</tool_call>' }}
        {%- endfor %}
        {{- '<|im_end|>\\n' }}
    {%- elif message.role == "tool" %}
        {%- if (loop.index0 == 0) or (messages[loop.index0 - 1].role != "tool") %}
            {{- '<|im_start|>user' }}
        {%- endif %}
        {{- '\\n<tool_response>\\n' }}
        {{- message.content }}
        {{- '\\n</tool_response>' }}
        {%- if loop.last or (messages[loop.index0 + 1].role != "tool") %}
            {{- '<|im_end|>\\n' }}
        {%- endif %}
    {%- endif %}
{%- endfor %}
{%- if add_generation_prompt %}
    {{- '<|im_start|>assistant\\n' }}
{%- endif %}
"""

# A plain ChatML template in the block style many community models ship (the whole-line tags
# exercise lstrip_blocks and trim_blocks, the loop variable and a namespace).
CHATML = """{% set ns = namespace(turns=0) %}
{% for message in messages %}
    {% set ns.turns = ns.turns + 1 %}
    <|im_start|>{{ message['role'] }}
{{ message['content'] }}<|im_end|>
{% endfor %}
{% if add_generation_prompt %}<|im_start|>assistant
{% endif %}{# turns: {{ ns.turns }} #}
"""

# Constructs outside the families' templates that the subset supports: filters, tests, slices,
# methods, arithmetic, tojson with nesting and unicode, inline if-else, loop.last, items().
FEATURES = """{%- set parts = [] -%}
{%- for m in messages[-2:] if m.role != 'system' -%}
{{ loop.index }}/{{ loop.length }}:{{ m.role | upper }}={{ m.content | trim | length }}{{ ',' if not loop.last else '.' }}
{%- endfor %}
{{ missing_value | default('n/a') }} {{ (messages|length) * 2 // 3 }} {{ 7 % 3 }} {{ -7 // 2 }} {{ 2 ** 5 }} {{ 1.5 + 1 }}
{{ messages[0].content[:4] }}|{{ messages[0].content[::-1][:3] }}|{{ 'a,b,,c'.split(',') }}|{{ ' x y '.split() }}
{{ {'k': [1, 2.5, none, true, "é\\"q"], 'n': {}} | tojson }}|{{ {'a': [1, {'b': 'c'}]} | tojson(indent=2) }}
{{ 'yes' if 'assistant' in messages | map(attribute='role') | list else 'no' }}
{%- for k, v in {'x': 1, 'y': 'two'}.items() %} {{ k }}~{{ v ~ '!' }}{% endfor %}
{{ none is none }} {{ undefined_name is defined }} {{ messages[0] is mapping }} {{ 'abc' is string }} {{ 3 is odd }}
{{ "Hello".startswith(('x', 'He')) }} {{ 'a-b'.replace('-', '+') }} {{ ['p', 'q'] | join('/') }} {{ [3, 4] | last }}
{{ messages[0].get('missing', 'fallback') }} {{ (messages | first).role }} {{ True }} {{ None }} {{ [1, 'a'] }}
"""

CONVERSATIONS = {
    "user": [{"role": "user", "content": "Hello, who are you?"}],
    "system_user": [{"role": "system", "content": "You are a terse assistant."},
                    {"role": "user", "content": "Name a hedgehog species."}],
    "multi_turn": [{"role": "system", "content": "  Be kind.  "},
                   {"role": "user", "content": "  Hi there  "},
                   {"role": "assistant", "content": "Hello! How can I help?"},
                   {"role": "user", "content": "Tell me about linear attention.\nIn two lines."}],
    "unicode": [{"role": "user", "content": "Grüße, 你好, emoji 🦔 and \"quotes\" and 'apostrophes'"}],
    "bad_alternation": [{"role": "user", "content": "one"}, {"role": "user", "content": "two"}],
}

TEMPLATES = {
    "llama2": (LLAMA2, "<s>", "</s>"),
    "llama3.2": (LLAMA32, "<|begin_of_text|>", "<|eot_id|>"),
    "qwen2.5": (QWEN25, None, "<|im_end|>"),
    "mistral": (MISTRAL, "<s>", "</s>"),
    "chatml": (CHATML, None, "<|im_end|>"),
    "features": (FEATURES, None, None),
}


def render(template, messages, add_generation_prompt, bos, eos):
    kwargs = {"date_string": "26 Jul 2024"}
    if bos is not None:
        kwargs["bos_token"] = bos
    if eos is not None:
        kwargs["eos_token"] = eos
    try:
        out = render_jinja_template(conversations=[messages], chat_template=template,
                                    add_generation_prompt=add_generation_prompt, **kwargs)
        text = out[0][0] if isinstance(out, tuple) else out[0]
        return {"text": text}
    except Exception as e:  # the template's own raise_exception, or an error of the renderer
        return {"error": str(e)}


# A conversation tokenized as apply_chat_template(tokenize=True) does it on a committed tiny
# tokenizer: the rendered text's special tokens are matched, none are added.
TOKENIZED = {
    "folder": "llama-tiny-tok",
    "bos_token": "<s>",
    "eos_token": "</s>",
    "chat_template": "{{ bos_token }}{% for m in messages %}[{{ m['role'] }}] {{ m['content'] }}\n{% endfor %}"
                     "{% if add_generation_prompt %}[assistant]{% endif %}",
    "messages": [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "The hedgehog is"}],
}


def tokenized_case(root):
    from transformers import PreTrainedTokenizerFast
    c = dict(TOKENIZED)
    tok = PreTrainedTokenizerFast(tokenizer_file=os.path.join(root, "..", "hf", c["folder"], "tokenizer.json"),
                                  bos_token=c["bos_token"], eos_token=c["eos_token"])
    tok.chat_template = c["chat_template"]
    c["text"] = tok.apply_chat_template(c["messages"], tokenize=False, add_generation_prompt=True)
    ids = tok.apply_chat_template(c["messages"], tokenize=True, add_generation_prompt=True)
    c["ids"] = list(ids["input_ids"] if isinstance(ids, dict) or hasattr(ids, "keys") else ids)
    return c


def main():
    root = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "fixtures", "chat_templates")
    os.makedirs(root, exist_ok=True)
    cases = []
    for name, (template, bos, eos) in TEMPLATES.items():
        for conv_name, messages in CONVERSATIONS.items():
            for agp in (True, False):
                r = render(template, messages, agp, bos, eos)
                cases.append({"template": name, "conversation": conv_name, "add_generation_prompt": agp, **r})
    doc = {"templates": {k: {"chat_template": t, "bos_token": b, "eos_token": e} for k, (t, b, e) in TEMPLATES.items()},
           "conversations": CONVERSATIONS, "date_string": "26 Jul 2024", "cases": cases,
           "tokenized": tokenized_case(root)}
    with open(os.path.join(root, "cases.json"), "w", encoding="utf-8") as f:
        json.dump(doc, f, ensure_ascii=False, indent=1)
        f.write("\n")
    print(f"wrote {len(cases)} cases to {root}/cases.json")


if __name__ == "__main__":
    main()
