"""Chat templates run with bounded time, output, loops, nesting and string sizes.

Every hostile template below ends in one ToycardsError that names the file the template came
from, without building the huge value it asks for; real templates render exactly as jinja2's
own sandbox renders them (the oracle).
"""

from __future__ import annotations

import json
import tracemalloc

import pytest
from gguf_factory import V, typed, write_gguf
from jinja2.sandbox import ImmutableSandboxedEnvironment

from toycards.errors import ToycardsError
from toycards.tokenizer.chat import render_chat
from toycards.tokenizer.sandbox import BoundedSandbox, Limits
from toycards.tokenizer.tokenizer import load_tokenizer

HI = [{"role": "user", "content": "Hi"}]

# template → the words of the error that say which bound it hit
HOSTILE = {
    "{% for x in range(10**9) %}{% endfor %}": "range of 1,000,000,000 items",
    "{% macro f(n) %}{{ f(n + 1) }}{% endmacro %}{{ f(0) }}": "deeper than 64",
    "{% for a in range(100000) %}{% for b in range(100000) %}x{% endfor %}{% endfor %}": (
        "over 1,000,000 loop iterations"
    ),
    "{{ 'a' * 10**9 }}": "string of 1,000,000,000 characters",
    "{{ ('ab' * 50000)|join('ab' * 50000) }}": "string of",
    "{{ range(100000)|join('x' * 100000) }}": "string of",
    "{{ ('x' * 100000).join('ab' * 50000) }}": "string of",
    "{% set ns = namespace(s='ab') %}{% for i in range(64) %}{% set ns.s = ns.s ~ ns.s %}{% endfor %}": (
        "string of 4,194,304 characters"
    ),
    "{% set ns = namespace(s='ab') %}{% for i in range(64) %}{% set ns.s = ns.s + ns.s %}{% endfor %}": (
        "string of 4,194,304 characters"
    ),
    "{{ 'a'|center(10**9) }}": "string of 1,000,000,000 characters",
    "{{ 'a'.ljust(10**9) }}": "string of 1,000,000,000 characters",
    "{{ 'a'.zfill(10**9) }}": "string of 1,000,000,000 characters",
    "{{ '%1000000000d' % 1 }}": "string of",
    "{{ '%*d' % (10**9, 1) }}": "string of",
    "{{ '%1000000000d'|format(1) }}": "string of",
    "{{ '{:>1000000000}'.format(1) }}": "string of",
    "{{ '{:{}}'.format(1, '>1000000000') }}": "string of",
    "{{ '{x:>1000000000}'.format_map({'x': 1}) }}": "string of",
    "{{ ('\n' * 100000)|indent(100000) }}": "string of",
    "{{ ('a' * 100000)|replace('', 'b' * 100000) }}": "string of",
    "{{ ('a' * 100000).replace('', 'b' * 100000) }}": "string of",
    "{{ ('\t' * 100000).expandtabs(100000) }}": "string of",
    "{{ ('a' * 100000).translate({97: 'b' * 100000}) }}": "string of",
    "{{ ('a ' * 100000)|wordwrap(1, wrapstring='x' * 100000) }}": "string of",
    "{{ messages|tojson(indent=10**9) }}": "string of",
    "{{ (1).to_bytes(10**9, 'big') }}": "string of",
    "{{ lipsum(10**9) }}": "string of",
    "{{ 2 ** (10**9) }}": "integer of 2,000,000,000 bits",
    "{% set ns = namespace(x=2**60) %}{% for i in range(64) %}{% set ns.x = ns.x * ns.x %}{% endfor %}": (
        "integer of"
    ),
    "{{ 1.5|round(10**9, 'ceil') }}": "rounds to 1,000,000,000 digits",
    "{{ ([1] * 10**9)|length }}": "list of 1,000,000,000 items",
    "{{ [1]|batch(10**9, 0)|list|length }}": "list of 1,000,000,000 items",
    "{{ [1]|slice(10**9)|list|length }}": "list of 1,000,000,000 items",
    "{{ ([[1] * 1000] * 100000)|sum(start=[])|length }}": "list of 100,000,000 items",
    "{% for x in [1] recursive %}{{ loop([1]) }}{% endfor %}": "deeper than 64",
    "{% block a %}{{ self.a() }}{% endblock %}": "deeper than 64",
    "{% set s = 'x' * 1000 %}{% for i in range(100000) %}{{ s }}{% endfor %}": "renders more than",
    "{% macro m() %}{% for i in range(100000) %}{{ 'x' * 1000 }}{% endfor %}{% endmacro %}{{ m()|length }}": (
        "characters in all"
    ),
    "{% macro m() %}{% for i in range(100000) %}"
    + "y" * 1000
    + "{% endfor %}{% endmacro %}{{ m()|length }}": ("characters in all"),
    # a list nested in itself doubles its text with each level, without any operator
    "{% set ns = namespace(x=['a' * 1000]) %}{% for i in range(64) %}{% set ns.x = [ns.x, ns.x] %}"
    "{% endfor %}{{ ns.x|upper }}": "text of",
    "x" * 200_001: "200,001 characters long",
}


@pytest.mark.parametrize("template", list(HOSTILE), ids=range(len(HOSTILE)))
def test_hostile_template_hits_a_bound_naming_the_file(template):
    with pytest.raises(ToycardsError) as e:
        render_chat(template, HI, source="model.gguf")
    assert str(e.value).startswith("model.gguf: chat template ")
    assert HOSTILE[template] in str(e.value)
    assert "\n" not in str(e.value)


@pytest.mark.parametrize(
    "template",
    [
        "{{ 'a' * 10**9 }}",
        "{{ 'a'|center(10**9) }}",
        "{{ ('ab' * 50000)|join('ab' * 50000) }}",
        "{{ '%1000000000d' % 1 }}",
        "{{ ([1] * 10**9)|length }}",
        "{{ 2 ** (10**9) }}",
    ],
)
def test_refused_value_is_never_built(template):
    tracemalloc.start()
    try:
        with pytest.raises(ToycardsError):
            render_chat(template, HI)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 50_000_000, f"peak {peak:,} bytes"


def test_deadline_ends_a_render():
    """An expired deadline stops the first loop iteration (the limit used by render_chat is
    seconds; this checks the check, not the clock)."""
    env = BoundedSandbox(Limits(seconds=-1.0))
    with pytest.raises(Exception, match="time limit"):
        env.render("{% for x in range(3) %}{{ x }}{% endfor %}", {})


def test_bounds_grow_with_the_input():
    """A template may echo a large conversation several times; the same output refused when
    the template makes it up."""
    big = [{"role": "user", "content": "x" * 3_000_000}]
    echo = "{% for i in range(3) %}{{ messages[0].content }}{% endfor %}"
    assert len(render_chat(echo, big)) == 9_000_000
    with pytest.raises(ToycardsError, match="renders more than 4,000,"):
        render_chat("{% for i in range(3) %}{{ 'x' * 3000000 }}{% endfor %}", HI)


def test_ordinary_work_within_the_bounds():
    template = (
        "{% macro depth(n) %}{% if n %}{{ depth(n - 1) }}{% else %}0{% endif %}{% endmacro %}"
        "{{ depth(60) }} {{ range(100000)|sum }} {{ ('ab' * 100)|length }} {{ 'x'.ljust(5, '.') }}|"
        "{% for a in range(300) %}{% for b in range(300) %}{% endfor %}{% endfor %}{{ 2 ** 100 }}"
    )
    assert render_chat(template, HI) == f"0 4999950000 200 x....|{2**100}"


# --- real templates render as jinja2's own sandbox renders them ----------------------------------

CHATML_TOOLS = """\
{%- if tools %}
    {{- '<|im_start|>system\\n' }}
    {%- if messages[0].role == 'system' %}{{- messages[0].content + '\\n\\n' }}{%- endif %}
    {{- "# Tools\\n<tools>" }}
    {%- for tool in tools %}{{- "\\n" }}{{- tool | tojson }}{%- endfor %}
    {{- "\\n</tools><|im_end|>\\n" }}
{%- elif messages[0].role == 'system' %}
    {{- '<|im_start|>system\\n' + messages[0].content + '<|im_end|>\\n' }}
{%- endif %}
{%- set ns = namespace(multi_step_tool=true, last_query_index=messages|length - 1) %}
{%- for message in messages[::-1] %}
    {%- set index = (messages|length - 1) - loop.index0 %}
    {%- if ns.multi_step_tool and message.role == "user" and message.content is string %}
        {%- set ns.multi_step_tool = false %}
        {%- set ns.last_query_index = index %}
    {%- endif %}
{%- endfor %}
{%- for message in messages %}
    {%- set content = message.content if message.content is string else '' %}
    {%- if message.role == "user" or (message.role == "system" and not loop.first) %}
        {{- '<|im_start|>' + message.role + '\\n' + content + '<|im_end|>' + '\\n' }}
    {%- elif message.role == "assistant" %}
        {%- if '</think>' in content %}
            {%- set content = content.split('</think>')[-1].lstrip('\\n') %}
        {%- endif %}
        {{- '<|im_start|>' + message.role + '\\n' + content }}
        {%- for tool_call in message.tool_calls or [] %}
            {%- set tool_call = tool_call.function or tool_call %}
            {{- '\\n<tool_call>\\n{"name": "' ~ tool_call.name ~ '", "arguments": ' }}
            {{- tool_call.arguments if tool_call.arguments is string else tool_call.arguments | tojson }}
            {{- '}\\n</tool_call>' }}
        {%- endfor %}
        {{- '<|im_end|>\\n' }}
    {%- elif message.role == "tool" %}
        {%- if loop.first or messages[loop.index0 - 1].role != "tool" %}{{- '<|im_start|>user' }}{%- endif %}
        {{- '\\n<tool_response>\\n' + content + '\\n</tool_response>' }}
        {%- if loop.last or messages[loop.index0 + 1].role != "tool" %}{{- '<|im_end|>\\n' }}{%- endif %}
    {%- endif %}
{%- endfor %}
{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}{%- endif %}
"""

LLAMA3_TOOLS = """\
{{- bos_token }}
{%- if messages[0]['role'] == 'system' %}
    {%- set system_message = messages[0]['content']|trim %}
    {%- set messages = messages[1:] %}
{%- else %}
    {%- set system_message = "" %}
{%- endif %}
{{- "<|start_header_id|>system<|end_header_id|>\\n\\n" }}
{{- "Today Date: " + date_string + "\\n\\n" }}
{%- if tools is not none %}
    {%- for t in tools %}{{- t | tojson(indent=4) }}{{- "\\n\\n" }}{%- endfor %}
{%- endif %}
{{- system_message }}{{- "<|eot_id|>" }}
{%- for message in messages %}
    {%- if message.role not in ['user', 'assistant', 'tool'] %}
        {{- raise_exception('Unknown role: ' + message.role) }}
    {%- endif %}
    {%- if message.role == 'tool' %}
        {{- "<|start_header_id|>ipython<|end_header_id|>\\n\\n" }}
        {{- message.content | tojson if message.content is mapping else message.content }}
    {%- else %}
        {{- '<|start_header_id|>' + message['role'] + '<|end_header_id|>\\n\\n' }}
        {%- if message.content is string %}{{- message['content'] | trim }}
        {%- else %}{{- message.content | selectattr('type', 'equalto', 'text') | map(attribute='text') | join(' ') }}
        {%- endif %}
    {%- endif %}
    {{- '<|eot_id|>' }}
{%- endfor %}
{%- if add_generation_prompt %}{{- '<|start_header_id|>assistant<|end_header_id|>\\n\\n' }}{%- endif %}
"""

MACROS = """\
{%- macro tool_index(messages, id) %}
{%- set counter = namespace(value=0, seen=false) %}
{%- for msg in messages %}{%- for call in msg.tool_calls or [] %}
    {%- if call.id == id and not counter.seen %}{{ counter.value }}{% set counter.seen = true %}{% endif %}
    {%- set counter.value = counter.value + 1 %}
{%- endfor %}{%- endfor %}
{%- endmacro %}
{%- set seen = namespace(ids=[]) %}
{%- for message in messages %}
    {%- if message.role == 'tool' and message.tool_call_id not in seen.ids %}
[{{ tool_index(messages, message.tool_call_id) }}: {{ message.content|tojson }}
        {%- for msg in messages[loop.index0 + 1:] %}
            {%- if msg.role == 'tool' %}, {{ tool_index(messages, msg.tool_call_id) }}: {{ msg.content|tojson }}
                {%- set seen.ids = seen.ids + [msg.tool_call_id] %}
            {%- else %}{%- break %}{%- endif %}
        {%- endfor %}]
    {%- elif message.role != 'tool' %}
<{{ message.role|upper|center(11) }}>{{ message.content|string|replace('\\n', ' ')|indent(2) }}{{ eos_token }}
    {%- endif %}
{%- endfor %}
{{ messages|map(attribute='role')|unique|join(',') }} {{ '%-6s|%5.2f' % ('ab', 3.14159) }} {{ '{:>4}'.format(7) }}
"""

TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "get_weather",
            "description": "Weather in a city",
            "parameters": {
                "type": "object",
                "properties": {"city": {"type": "string", "description": "é名"}},
            },
        },
    }
]
CONVERSATION = [
    {"role": "system", "content": "Be brief.\n"},
    {"role": "user", "content": [{"type": "text", "text": "Weather"}, {"type": "text", "text": "in Paris?"}]},
    {
        "role": "assistant",
        "content": "<think>look it up</think>\nOne moment.",
        "tool_calls": [
            {
                "id": "call_1",
                "type": "function",
                "function": {"name": "get_weather", "arguments": {"city": "Paris"}},
            },
            {
                "id": "call_2",
                "type": "function",
                "function": {"name": "get_weather", "arguments": '{"city": "Nice"}'},
            },
        ],
    },
    {"role": "tool", "tool_call_id": "call_1", "content": "sunny"},
    {"role": "tool", "tool_call_id": "call_2", "content": "rain"},
    {"role": "assistant", "content": "Sunny in Paris."},
    {"role": "user", "content": "Thanks"},
]


def _oracle(template: str, messages: list[dict], **kw: object) -> str:
    """Hugging Face's conventions in jinja2's plain immutable sandbox."""

    def raise_exception(message):
        raise ValueError(message)

    env = ImmutableSandboxedEnvironment(
        trim_blocks=True, lstrip_blocks=True, extensions=["jinja2.ext.loopcontrols"]
    )
    env.filters["tojson"] = lambda v, indent=None: json.dumps(v, indent=indent, ensure_ascii=False)
    env.globals["raise_exception"] = raise_exception
    return env.from_string(template).render(messages=messages, **kw)


@pytest.mark.parametrize("template", [CHATML_TOOLS, LLAMA3_TOOLS, MACROS], ids=["chatml", "llama3", "macros"])
@pytest.mark.parametrize("tools", [None, TOOLS], ids=["no-tools", "tools"])
@pytest.mark.parametrize(
    "messages",
    [CONVERSATION, CONVERSATION[1:2], CONVERSATION[:1] + CONVERSATION[1:] * 50],
    ids=["chat", "one", "long"],
)
def test_real_templates_render_as_in_jinja2s_sandbox(template, tools, messages):
    kw = {
        "tools": tools,
        "add_generation_prompt": True,
        "bos_token": "<s>",
        "eos_token": "</s>",
        "date_string": "1 Jan",
    }
    want = _oracle(template, messages, **kw)
    assert render_chat(template, messages, **kw) == want
    assert len(want) > 40  # rendered, not an empty string from a silent failure


def test_raise_exception_names_the_file():
    with pytest.raises(ToycardsError, match=r"^model\.gguf: chat template raised: Unknown role: bot$"):
        render_chat(
            LLAMA3_TOOLS, [{"role": "bot", "content": "x"}], source="model.gguf", date_string="x", tools=None
        )


def test_tokenizer_names_its_file(tmp_path):
    path = write_gguf(
        tmp_path / "vocab.gguf",
        kv={
            "tokenizer.ggml.model": typed("llama", V.STRING),
            "tokenizer.ggml.tokens": typed(["<unk>", "<s>", "</s>", "a"], V.ARRAY, V.STRING),
            "tokenizer.ggml.scores": typed([0.0, 0.0, 0.0, -1.0], V.ARRAY, V.FLOAT32),
            "tokenizer.ggml.token_type": typed([2, 3, 3, 1], V.ARRAY, V.INT32),
            "tokenizer.chat_template": typed("{{ bos_token }}{{ 'a' * 10**9 }}", V.STRING),
        },
    )
    with pytest.raises(ToycardsError) as e:
        load_tokenizer(path).apply_chat_template(HI)
    assert str(e.value).startswith(f"{path}: chat template builds a string of 1,000,000,000 characters")
