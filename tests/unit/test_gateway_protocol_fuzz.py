"""Property-based fuzzing of the protocol v1 parser: whatever a client sends, the parser
returns a message or raises ProtocolError with a stable code; it never fails otherwise."""

import json

from hypothesis import given, settings
from hypothesis import strategies as st

from gateway import messages as p
from speechstream import protocol as v1

VOICES = ("en_US-joe-medium",)
MAX_TEXT = 200

json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(),
    lambda children: st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=8), children, max_size=4),
    max_leaves=12,
)
known_keys = st.sampled_from(
    ["type", "context_id", "text", "voice", "format", "sample_rate", "frame_ms", "timestamps",
     "length_scale", "noise_scale", "noise_w", "seed"]
)
known_types = st.sampled_from(["config", *p.CONTEXT_TYPES, "Speak", ""])
messages = st.dictionaries(known_keys, json_values, max_size=6).flatmap(
    lambda m: st.one_of(st.just(m), known_types.map(lambda t: {**m, "type": t}))
)


def outcome(frame: str | bytes):
    try:
        return p.parse_message(frame, VOICES, MAX_TEXT)
    except p.ProtocolError as e:
        assert e.code in v1.ERROR_CODES and e.message
        return e


@settings(max_examples=400, deadline=None)
@given(st.text() | st.binary())
def test_any_frame_is_a_message_or_a_coded_error(frame):
    outcome(frame)


@settings(max_examples=600, deadline=None)
@given(messages)
def test_message_shaped_objects_are_messages_or_coded_errors(message):
    result = outcome(json.dumps(message))
    if isinstance(result, p.ContextMessage):
        assert result.type == message["type"] and result.context_id == message["context_id"]
        assert 0 < len(result.context_id) <= v1.MAX_CONTEXT_ID and len(result.text) <= MAX_TEXT
        result.text.encode("utf-8")  # what reaches Triton is always encodable
    elif isinstance(result, p.Config):
        assert message["type"] == "config" and result.voice in VOICES and result.format in v1.FORMATS
        assert result.sample_rate in v1.SAMPLE_RATES and result.frame_ms in v1.FRAME_MS


@settings(max_examples=200, deadline=None)
@given(st.sampled_from(p.CONTEXT_TYPES), st.text(min_size=1, max_size=v1.MAX_CONTEXT_ID), st.text(max_size=MAX_TEXT))
def test_valid_context_messages_parse_to_what_was_sent(kind, context_id, text):
    message = {"type": kind, "context_id": context_id, "text": text}
    result = outcome(json.dumps(message))
    surrogate = any(0xD800 <= ord(ch) <= 0xDFFF for ch in text)
    if kind in p.TEXT_TYPES and surrogate:
        assert isinstance(result, p.ProtocolError) and result.code == v1.INVALID_FIELD
    else:
        assert result == p.ContextMessage(kind, context_id, text if kind in p.TEXT_TYPES else "")
