#!/usr/bin/python3
"""Renders conversations through Kimi K2's own chat template: tests/fixtures/k2/render_golden.json.

The template is the release's chat_template.jinja (tests/fixtures/k2, provenance in
tests/fixtures/README.md). It is evaluated the way the serving stacks evaluate a Hugging Face chat
template: trim_blocks and lstrip_blocks on, the loop-controls extension (the template uses
`break`), and a `tojson` filter that is json.dumps with ensure_ascii off and Python's default
separators (Jinja's own filter sorts keys and escapes HTML, which is not what a model saw).

Each case keeps the chat-completions body waste parses (`request`), what the template was given
(`messages`, `tools`), the rendered string (`text`) and that string cut at the K2 special tokens
(`segments`: [text, is_special] pairs, <think> being text as in a vocabulary without it).
tests/k2_template_test.cpp checks that waste renders every case to the same segments.

    /usr/bin/python3 scripts/reference/k2_render_golden.py            # rewrites the golden file
    /usr/bin/python3 scripts/reference/k2_render_golden.py --check    # exit 1 if it differs
"""

import json
import pathlib
import re
import sys

import jinja2
import jinja2.ext
import jinja2.sandbox

ROOT = pathlib.Path(__file__).resolve().parents[2]
FIXTURES = ROOT / "tests" / "fixtures" / "k2"

SPECIALS = [
    "<|im_system|>", "<|im_user|>", "<|im_assistant|>", "<|im_middle|>", "<|im_end|>",
    "<|tool_calls_section_begin|>", "<|tool_calls_section_end|>", "<|tool_call_begin|>",
    "<|tool_call_argument_begin|>", "<|tool_call_end|>",
]


def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
    return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators,
                      sort_keys=sort_keys)


def environment():
    env = jinja2.sandbox.ImmutableSandboxedEnvironment(
        trim_blocks=True, lstrip_blocks=True, extensions=[jinja2.ext.loopcontrols])
    env.filters["tojson"] = tojson
    return env


def segments(text):
    pattern = "(" + "|".join(re.escape(s) for s in SPECIALS) + ")"
    return [[piece, piece in SPECIALS] for piece in re.split(pattern, text) if piece]


WEATHER = {"type": "function", "function": {
    "name": "get_weather",
    "description": "Current weather for a city — in °C",
    "parameters": {"type": "object",
                   "properties": {"city": {"type": "string", "description": "City name"},
                                  "days": {"type": "integer", "minimum": 1}},
                   "required": ["city"]}}}
SEARCH = {"type": "function", "function": {
    "name": "search.web",
    "description": "Search the web",
    "parameters": {"type": "object", "properties": {"q": {"type": "string"}},
                   "required": ["q"], "additionalProperties": False}}}
NO_PARAMS = {"type": "function", "function": {"name": "now"}}


def call(call_id, name, arguments):
    return {"id": call_id, "type": "function",
            "function": {"name": name, "arguments": arguments}}


CASES = [
    ("user_only_default_system", [{"role": "user", "content": "Hello"}], None, None),
    ("system_and_turns", [
        {"role": "system", "content": "You are terse."},
        {"role": "user", "content": "Capital of France?"},
        {"role": "assistant", "content": "Paris.", "reasoning_content": "easy"},
        {"role": "user", "content": "And of Italy?"},
    ], None, None),
    ("tools_call_and_results", [
        {"role": "system", "content": "Use tools when useful."},
        {"role": "user", "content": "Weather in Rome and news about it?"},
        {"role": "assistant", "content": "", "reasoning_content": "Two lookups.",
         "tool_calls": [call("functions.get_weather:0", "get_weather", '{"city": "Rome"}'),
                        call("functions.search.web:1", "search.web", '{"q":"Rome news"}')]},
        {"role": "tool", "tool_call_id": "functions.get_weather:0", "name": "get_weather",
         "content": "18°C, clear"},
        {"role": "tool", "tool_call_id": "functions.search.web:1",
         "content": [{"type": "text", "text": "1. "}, {"type": "text", "text": "Rome news"}]},
    ], [WEATHER, SEARCH], None),
    ("agent_multi_turn_history", [
        {"role": "user", "content": "What time is it?"},
        {"role": "assistant", "content": None, "reasoning_content": "Ask the clock.",
         "tool_calls": [call("functions.now:0", "now", "{}")]},
        {"role": "tool", "tool_call_id": "functions.now:0", "content": "12:00"},
        {"role": "assistant", "content": "It is noon.", "reasoning_content": "Read it out."},
        {"role": "user", "content": "And the weather in Zürich for 2 days?"},
        {"role": "assistant", "content": "Checking.", "reasoning_content": "Call the tool.",
         "tool_calls": [call("functions.get_weather:1", "get_weather",
                             '{"city": "Zürich", "days": 2}')]},
        {"role": "tool", "tool_call_id": "functions.get_weather:1", "name": "get_weather",
         "content": "{\"temp\": 3.5}"},
    ], [NO_PARAMS, WEATHER], None),
    ("object_arguments_unicode_names", [
        {"role": "system", "content": "Système: réponds en français 🇫🇷"},
        {"role": "user", "name": "Zoë", "content": [
            {"type": "text", "text": "日本語で"}, {"type": "text", "text": " – bitte 😀\n\nzwei Zeilen"}]},
        {"role": "assistant",
         "tool_calls": [call("functions.get_weather:0", "get_weather",
                             {"city": "Köln", "days": 1, "opts": {"unit": "°C", "x": [1.5, 1e-05, True, None]}})]},
        {"role": "tool", "tool_call_id": "functions.get_weather:0", "content": "  spaced  "},
    ], [WEATHER], None),
    ("system_not_first", [
        {"role": "user", "content": "first"},
        {"role": "system", "content": "late system"},
        {"role": "assistant", "content": "ok"},
    ], None, None),
    ("flat_tool_declaration", [{"role": "user", "content": "now?"}],
     [NO_PARAMS], [{"type": "function", "name": "now"}]),
]


def build():
    template = environment().from_string(
        (FIXTURES / "chat_template.jinja").read_text(encoding="utf-8"))
    cases = []
    for name, messages, tools, request_tools in CASES:
        kwargs = {"messages": messages, "add_generation_prompt": True}
        if tools:
            kwargs["tools"] = tools
        text = template.render(**kwargs)
        request = {"messages": messages}
        if request_tools or tools:
            request["tools"] = request_tools or tools
        cases.append({"name": name, "request": json.dumps(request, ensure_ascii=False),
                      "messages": messages, "tools": tools, "text": text,
                      "segments": segments(text)})
    return {
        "note": "Kimi K2's chat_template.jinja (tests/fixtures/k2) rendered by "
                "scripts/reference/k2_render_golden.py with add_generation_prompt",
        "cases": cases,
    }


def main():
    out = json.dumps(build(), ensure_ascii=False, indent=1) + "\n"
    path = FIXTURES / "render_golden.json"
    if "--check" in sys.argv[1:]:
        if path.read_text(encoding="utf-8") != out:
            print(f"{path} differs from what the template renders now", file=sys.stderr)
            return 1
        return 0
    path.write_text(out, encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
