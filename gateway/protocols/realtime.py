"""OpenAI's Realtime API (GET /v1/realtime), sans I/O: one `RealtimeSession` per WebSocket.

The session speaks the Realtime API's events to its client and protocol v1 to a
`Session` inside it, in listen mode with chat: the same recognizer, turn detection,
Thinker, speculation, synthesis and barge-in as a v1 connection, so the conversation's
rules live in one place (gateway/conversation/). What the inner session answers is
translated: its v1 messages become Realtime events, its audio frames
`response.output_audio.delta`; the backend work it asks for (synthesis, Thinker
requests, the recognizer's audio) passes through to the shell untouched.

A spoken turn (a v1 utterance, `turn-N`) is the user's audio item; its reply (the v1
chat turn of the same id, or of a `response.create`) is a response and its assistant
item. Events go out in the dialect the client spoke: GA, or the beta's names and flat
session (gateway/protocols/realtime_dialect.py). docs/realtime.md lists what is
supported, field by field.
"""

from __future__ import annotations

import base64
import binascii
import dataclasses
import json
import logging
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from gateway.conversation.actions import Action, Send
from gateway.protocols import realtime_dialect as d
from gateway.protocols.realtime_dialect import RealtimeError, Settings
from gateway.protocols.session import Session
from speechstream import protocol as v1

log = logging.getLogger("speechstream.gateway")

INPUT_CHUNK_MS = 100  # an append's audio goes to the recognizer in pieces of this (v1 takes at most 200 ms a message)
MAX_APPEND_S = v1.LISTEN_MAX_AHEAD_S  # the most audio one append may carry: more is a file sent at once


def new_id(prefix: str) -> str:
    return f"{prefix}_{uuid.uuid4().hex[:20]}"


@dataclass
class Response:
    """One reply: the Realtime response and its assistant item, over a v1 chat turn."""

    id: str
    item_id: str
    turn_id: str
    started: bool = False  # its item and content part were announced
    transcript: str = ""
    audio_ms: float = 0.0  # audio sent so far
    words: list[tuple[str, int]] = field(default_factory=list)  # (word, end ms) from its timestamps: what truncate keeps
    metadata: dict | None = None  # response.create's, echoed (clients match their requests by it)
    cancelled_by_client: bool = False  # response.cancel, rather than new speech (barge-in)


class RealtimeSession:
    """One connection speaking OpenAI's Realtime API over a protocol-v1 `Session`."""

    def __init__(self, inner: Session, beta: bool = False, model: str = "speechstream",
                 transcription_only: bool = False) -> None:
        self.inner = inner
        self.dialect = d.Dialect(beta)
        self.id = new_id("sess")
        self.model = model
        self.settings = Settings(voice=inner.config.voice, transcription_only=transcription_only)
        self.configured = False  # the inner session has its config (at the first audio, item or response)
        self.items: dict[str, dict] = {}  # the conversation's items, by id, in order
        self.user_items: dict[str, str] = {}  # a spoken turn's id → its user item's id
        self.speech_ms: dict[str, list[int]] = {}  # a spoken turn's id → where its speech started and stopped
        self.heard_so_far: dict[str, str] = {}  # a spoken turn's id → the transcript its deltas have told
        self.pending: list[str] = []  # user texts not yet answered (create_response false, or items created)
        self.responses: dict[str, Response] = {}  # by v1 turn id, while in progress
        self.by_stream: dict[int, Response] = {}  # v1 audio stream → its response
        self.cleared: set[str] = set()  # spoken turns whose audio the client cleared: no item, no reply
        self.last_response: Response | None = None
        self._asked = 0  # v1 turns asked by response.create

    # What the shell needs of a session (gateway/protocols/websocket.py)

    @property
    def speaking(self):
        return self.inner.speaking

    @property
    def config(self):
        return self.inner.config

    def start(self) -> list[Action]:
        self.inner.start()  # its `ready` is v1's; the client gets session.created
        return [self._event("session.created", session=self._session())]

    def is_current(self, job_id: int) -> bool:
        return self.inner.is_current(job_id)

    def idle(self, seconds: float) -> list[Action]:
        return self._translate(self.inner.idle(seconds))

    def abort(self) -> list[Action]:
        return self.inner.abort()

    def error(self, code: str, message: str, context_id: str | None = None, retry_after_ms: int | None = None) -> Send:
        return self._error(RealtimeError(message, code=code, kind=d.error_kind(code)))

    # Client events

    def receive(self, frame: str | bytes) -> list[Action]:
        """The actions answering one client event; a refused one gets an `error` event."""
        event_id = None
        try:
            size = len(frame) if isinstance(frame, bytes) else len(frame.encode("utf-8", "surrogatepass"))
            limit = self.inner.limits.max_message_bytes
            if size > limit:
                raise RealtimeError(f"an event of {size} bytes; the limit is {limit}", code=v1.MESSAGE_TOO_LARGE)
            event = d.parse_event(frame)
            event_id = event.get("event_id")
            handler = self._handlers().get(event["type"])
            if handler is None:
                raise RealtimeError(f"unknown event type {event['type']!r}", param="type")
            return handler(event)
        except RealtimeError as e:
            return [self._error(e, event_id)]
        except Exception:
            log.exception("realtime session %s: unexpected error handling an event", self.id)
            return [self._error(RealtimeError("the server failed to handle this event", kind="server_error",
                                              code="internal_error"), event_id)]

    def _handlers(self) -> dict[str, Callable[[dict], list[Action]]]:
        return {
            "session.update": self._session_update,
            "transcription_session.update": self._session_update,
            "input_audio_buffer.append": self._append,
            "input_audio_buffer.commit": self._commit,
            "input_audio_buffer.clear": self._clear,
            "conversation.item.create": self._item_create,
            "conversation.item.retrieve": self._item_retrieve,
            "conversation.item.delete": self._item_delete,
            "conversation.item.truncate": self._truncate,
            "response.create": self._response_create,
            "response.cancel": self._response_cancel,
        }

    def _session_update(self, event: dict) -> list[Action]:
        settings = self.dialect.read_session(event.get("session"), self.settings, self.speaking.voices)
        if self.configured and settings.fixed() != self.settings.fixed():
            raise RealtimeError("the audio formats, turn detection and session type are fixed once audio, an item "
                                "or a response has begun; open a new session to change them", param="session")
        self.settings = settings
        if self.configured:
            self._apply_chat()
        return [self._event("session.updated", session=self._session())]

    def _append(self, event: dict) -> list[Action]:
        audio = event.get("audio")
        if not isinstance(audio, str):
            raise RealtimeError("input_audio_buffer.append needs `audio`, base64 text", code="missing_required_parameter",
                                param="audio")
        try:
            data = base64.b64decode(audio, validate=True)
        except (binascii.Error, ValueError):
            raise RealtimeError("`audio` is not valid base64", param="audio") from None
        pcm = self.settings.input.to_pcm(data)
        if len(pcm) / 2 > MAX_APPEND_S * self.settings.input.rate:
            raise RealtimeError(f"an append carries at most {MAX_APPEND_S:g} s of audio: send it as it is recorded",
                                param="audio")
        actions = self._configure()
        step = self.settings.input.rate * INPUT_CHUNK_MS // 1000 * 2
        for start in range(0, len(pcm), step):
            actions += self._translate(self.inner.receive(pcm[start:start + step]))
        return actions

    def _commit(self, event: dict) -> list[Action]:
        """The speaker's turn ends now (the recognizer's final follows); with turn detection
        off, the only way a turn ends."""
        if not self.configured:
            raise RealtimeError("the input audio buffer is empty", code="input_audio_buffer_commit_empty")
        return self._translate(self.inner.receive(json.dumps({"type": "end_of_speech"})))

    def _clear(self, event: dict) -> list[Action]:
        """The audio of the turn being spoken is dropped: it becomes no item and gets no reply."""
        self.cleared |= set(self.user_items)  # spoken turns not yet final
        return [self._event("input_audio_buffer.cleared")]

    def _item_create(self, event: dict) -> list[Action]:
        item = d.read_item(event.get("item"))
        actions = self._configure()
        self.pending.append(item["content"][0]["text"])
        return actions + self._add_item(item, event.get("previous_item_id"))

    def _item_retrieve(self, event: dict) -> list[Action]:
        item = self.items.get(self._item_id(event))
        return [self._event("conversation.item.retrieved", item=item)]

    def _item_delete(self, event: dict) -> list[Action]:
        item_id = self._item_id(event)
        del self.items[item_id]
        return [self._event("conversation.item.deleted", item_id=item_id)]

    def _truncate(self, event: dict) -> list[Action]:
        """The client played the assistant item's audio up to `audio_end_ms`: the
        conversation keeps only the words heard whole by then."""
        item_id = self._item_id(event)
        end_ms = event.get("audio_end_ms")
        if not isinstance(end_ms, int) or end_ms < 0:
            raise RealtimeError("audio_end_ms must be a whole number of ms, 0 or more", param="audio_end_ms")
        response = next((r for r in [*self.responses.values(), self.last_response] if r and r.item_id == item_id), None)
        if response is None:
            raise RealtimeError(f"item {item_id!r} is not an assistant item of this session's last replies",
                                param="item_id")
        if end_ms > response.audio_ms:
            raise RealtimeError(f"audio_end_ms {end_ms} is past the item's audio ({response.audio_ms:.0f} ms)",
                                param="audio_end_ms")
        heard = " ".join(word for word, word_end in response.words if word_end <= end_ms)
        actions = self._translate(self.inner.chatting.interrupt(response.turn_id, heard))
        self._set_transcript(item_id, heard)
        return actions + [self._event("conversation.item.truncated", item_id=item_id,
                                      content_index=event.get("content_index", 0), audio_end_ms=end_ms)]

    def _response_create(self, event: dict) -> list[Action]:
        metadata = d.read_response_options(event.get("response"))
        if self.settings.transcription_only:
            raise RealtimeError("a transcription session makes no responses", param="type")
        actions = self._configure()
        self._asked += 1
        turn_id = f"response-{self._asked}"
        if not self.pending:  # the chat model answers the user: with nothing new, an empty response
            response = Response(new_id("resp"), new_id("item"), turn_id, metadata=metadata)
            return actions + [self._event("response.created", response=self._response(response, "in_progress")),
                              self._event("response.done", response=self._response(response, "completed"))]
        text, self.pending = "\n".join(self.pending), []
        actions += self._start_response(turn_id, metadata)
        return actions + self._translate(self.inner.receive(json.dumps(
            {"type": "user", "turn_id": turn_id, "text": text, "final": True})))

    def _response_cancel(self, event: dict) -> list[Action]:
        wanted = event.get("response_id")
        response = next((r for r in self.responses.values() if wanted in (None, r.id)), None)
        if response is None:
            raise RealtimeError("no response is in progress", code="response_cancel_not_active",
                                param="response_id")
        response.cancelled_by_client = True
        return self._translate(self.inner.receive(json.dumps({"type": "cancel", "context_id": response.turn_id})))

    # The inner session's events (the runners call these, as on a v1 connection)

    def audio(self, *args) -> list[Action]:
        return self._translate(self.inner.audio(*args))

    def finished(self, job_id: int) -> list[Action]:
        return self._translate(self.inner.finished(job_id))

    def resuming(self, *args) -> list[Action]:
        return self._translate(self.inner.resuming(*args))

    def failed(self, *args) -> list[Action]:
        return self._translate(self.inner.failed(*args))

    def admitted(self, context_id: str) -> list[Action]:
        return self._translate(self.inner.admitted(context_id))

    def moved(self, context_id: str, position: int) -> list[Action]:
        return self._translate(self.inner.moved(context_id, position))

    def thought(self, *args) -> list[Action]:
        return self._translate(self.inner.thought(*args))

    def thought_done(self, think_id: int) -> list[Action]:
        return self._translate(self.inner.thought_done(think_id))

    def thought_failed(self, *args) -> list[Action]:
        return self._translate(self.inner.thought_failed(*args))

    def recognized(self, *args) -> list[Action]:
        return self._translate(self.inner.recognized(*args))

    # The inner session

    def _configure(self) -> list[Action]:
        """The inner session's config, from the settings, once."""
        if self.configured:
            return []
        self.configured = True
        actions = self.inner.receive(json.dumps(self.settings.v1_config()))
        return self._translate(actions)

    def _apply_chat(self) -> None:
        """Instructions, voice and output tokens apply from the next reply on."""
        config = self.inner.speaking.config
        if config.chat is None:
            return
        chat = dataclasses.replace(config.chat, system=self.settings.system(), max_tokens=self.settings.max_tokens)
        self.inner.speaking.config = dataclasses.replace(config, chat=chat, voice=self.settings.voice)

    def _translate(self, actions: list[Action]) -> list[Action]:
        """The inner session's actions with its messages and audio as Realtime events."""
        out: list[Action] = []
        for action in actions:
            if not isinstance(action, Send):
                out.append(action)
            elif isinstance(action.data, bytes):
                out += self._audio(v1.parse_audio_frame(action.data))
            else:
                message = json.loads(action.data)
                out += getattr(self, f"_on_{message['type']}", self._ignored)(message)
        return out

    def _ignored(self, message: dict) -> list[Action]:
        return []  # ready, queued, flushed, resuming: v1's, with no Realtime counterpart

    def _on_error(self, message: dict) -> list[Action]:
        actions: list[Action] = []
        response = self.responses.get(message.get("context_id") or "")
        if response is not None:
            actions = self._end_response(response, "failed", {"type": "failed", "error": {
                "type": "server_error", "code": message["code"], "message": message["message"]}})
        return actions + [self._error(RealtimeError(message["message"], kind=d.error_kind(message["code"]),
                                                    code=message["code"]))]

    def _on_speech_started(self, message: dict) -> list[Action]:
        item_id = self.user_items.setdefault(message["turn_id"], new_id("item"))
        self.speech_ms[message["turn_id"]] = [message["audio_ms"]] * 2
        return [self._event("input_audio_buffer.speech_started", audio_start_ms=message["audio_ms"], item_id=item_id)]

    def _on_speech_stopped(self, message: dict) -> list[Action]:
        item_id = self.user_items.setdefault(message["turn_id"], new_id("item"))
        self.speech_ms.setdefault(message["turn_id"], [0, 0])[1] = message["audio_ms"]
        return [self._event("input_audio_buffer.speech_stopped", audio_end_ms=message["audio_ms"], item_id=item_id)]

    def _on_transcript(self, message: dict) -> list[Action]:
        turn_id, text = message["turn_id"], message["text"]
        item_id = self.user_items.setdefault(turn_id, new_id("item"))
        if not message["final"]:
            return self._transcript_delta(turn_id, item_id, text)
        del self.user_items[turn_id]
        self.heard_so_far.pop(turn_id, None)
        started, stopped = self.speech_ms.pop(turn_id, (0, 0))
        if turn_id in self.cleared:
            self.cleared.discard(turn_id)
            return self._translate(self.inner.chatting.forget(turn_id) if turn_id in self.inner.chatting else [])
        item = {"id": item_id, "type": "message", "role": "user", "status": "completed",
                "content": [{"type": "input_audio", "transcript": text}]}
        previous = next(reversed(self.items), None)
        actions = [self._event("input_audio_buffer.committed", previous_item_id=previous, item_id=item_id)]
        actions += self._add_item(item, previous)
        if self.settings.transcription is not None:
            actions.append(self._event("conversation.item.input_audio_transcription.completed", item_id=item_id,
                                       content_index=0, transcript=text,
                                       usage={"type": "duration", "seconds": (stopped - started) / 1000}))
        if not text.strip() or self.settings.transcription_only:
            return actions
        if self.settings.create_response:  # the inner session asked the Thinker (its reply may be whole already)
            return actions + self._start_response(turn_id)
        self.pending.append(text)
        return actions

    def _transcript_delta(self, turn_id: str, item_id: str, partial: str) -> list[Action]:
        """A partial transcript as a delta, where it adds to what the deltas told (Realtime's
        deltas only add: a partial that revises earlier words is not told; the completed
        transcript is the whole)."""
        told = self.heard_so_far.get(turn_id, "")
        if self.settings.transcription is None or not partial.startswith(told) or partial == told:
            return []
        self.heard_so_far[turn_id] = partial
        return [self._event("conversation.item.input_audio_transcription.delta", item_id=item_id, content_index=0,
                            delta=partial[len(told):])]

    def _start_response(self, turn_id: str, metadata: dict | None = None) -> list[Action]:
        response = self.responses[turn_id] = Response(new_id("resp"), new_id("item"), turn_id, metadata=metadata)
        return [self._event("response.created", response=self._response(response, "in_progress"))]

    def _begin_output(self, response: Response) -> list[Action]:
        """The assistant item and its audio part, announced before the reply's first word or sample."""
        if response.started:
            return []
        response.started = True
        item = self._assistant_item(response, "in_progress")
        self.items[response.item_id] = item
        part = {"type": "audio", "transcript": ""}
        return [self._event("response.output_item.added", response_id=response.id, output_index=0, item=item),
                self._event("conversation.item.added", item=item, previous_item_id=self._previous(response.item_id)),
                self._event("response.content_part.added", response_id=response.id, item_id=response.item_id,
                            output_index=0, content_index=0, part=part)]

    def _on_audio_start(self, message: dict) -> list[Action]:
        response = self.responses.get(message["context_id"])
        if response is None:
            return []
        self.by_stream[message["stream"]] = response
        return self._begin_output(response)

    def _audio(self, frame: v1.AudioFrame) -> list[Action]:
        response = self.by_stream.get(frame.stream)
        if response is None or response.turn_id not in self.responses:
            return []
        ms = self.settings.output.ms(len(frame.payload))
        response.audio_ms += ms
        delta = self._event("response.output_audio.delta", response_id=response.id, item_id=response.item_id,
                            output_index=0, content_index=0, delta=base64.b64encode(frame.payload).decode())
        return [dataclasses.replace(delta, audio_s=ms / 1000)]

    def _on_reply_text(self, message: dict) -> list[Action]:
        response = self.responses.get(message["turn_id"])
        if response is None:
            return []
        response.transcript += message["text"]
        return self._begin_output(response) + [self._event(
            "response.output_audio_transcript.delta", response_id=response.id, item_id=response.item_id, output_index=0,
            content_index=0, delta=message["text"])]

    def _on_timestamps(self, message: dict) -> list[Action]:
        response = self.responses.get(message["context_id"])
        if response is not None:
            response.words += zip(message["words"], message["end_ms"])
        return []

    def _on_done(self, message: dict) -> list[Action]:
        response = self.responses.get(message["context_id"])
        return [] if response is None else self._end_response(response, "completed")

    def _on_cancelled(self, message: dict) -> list[Action]:
        response = self.responses.get(message["context_id"])
        if response is None:
            return []
        reason = "client_cancelled" if response.cancelled_by_client else "turn_detected"
        return self._end_response(response, "cancelled", {"type": "cancelled", "reason": reason})

    def _end_response(self, response: Response, status: str, details: dict | None = None) -> list[Action]:
        del self.responses[response.turn_id]
        self.by_stream = {s: r for s, r in self.by_stream.items() if r is not response}
        self.last_response = response
        actions: list[Action] = []
        if response.started:
            item_status = "completed" if status == "completed" else "incomplete"
            item = self.items[response.item_id] = self._assistant_item(response, item_status)
            part = {"type": "audio", "transcript": response.transcript}
            common = {"response_id": response.id, "item_id": response.item_id, "output_index": 0}
            actions += [self._event("response.output_audio.done", **common, content_index=0),
                        self._event("response.output_audio_transcript.done", **common, content_index=0,
                                    transcript=response.transcript),
                        self._event("response.content_part.done", **common, content_index=0, part=part),
                        self._event("response.output_item.done", response_id=response.id, output_index=0, item=item)]
            if not self.dialect.beta:
                actions.append(self._event("conversation.item.done", item=item))
        return actions + [self._event("response.done", response=self._response(response, status, details))]

    # Items and shapes

    def _add_item(self, item: dict, previous: str | None) -> list[Action]:
        item.setdefault("id", new_id("item"))
        item.setdefault("object", "realtime.item")
        self.items[item["id"]] = item
        events = [self._event("conversation.item.added", previous_item_id=previous, item=item)]
        if not self.dialect.beta:
            events.append(self._event("conversation.item.done", previous_item_id=previous, item=item))
        return events

    def _item_id(self, event: dict) -> str:
        item_id = event.get("item_id")
        if item_id not in self.items:
            raise RealtimeError(f"no item {item_id!r} in this conversation", param="item_id")
        return item_id

    def _previous(self, item_id: str) -> str | None:
        ids = list(self.items)
        at = ids.index(item_id)
        return ids[at - 1] if at else None

    def _set_transcript(self, item_id: str, transcript: str) -> None:
        for part in self.items[item_id].get("content", []):
            part["transcript"] = transcript

    def _assistant_item(self, response: Response, status: str) -> dict:
        return {"id": response.item_id, "object": "realtime.item", "type": "message", "role": "assistant",
                "status": status, "content": [{"type": self.dialect.audio_content, "transcript": response.transcript}]}

    def _response(self, response: Response, status: str, details: dict | None = None) -> dict:
        output = [self.items[response.item_id]] if response.started else []
        return {"id": response.id, "object": "realtime.response", "status": status, "status_details": details,
                "output": output, "conversation_id": self.id, "usage": None, "metadata": response.metadata,
                **self.dialect.response_shape(self.settings)}

    def _session(self) -> dict:
        return self.dialect.session(self.settings, self.id, self.model)

    def _event(self, kind: str, **fields: Any) -> Send:
        """Server event `kind` (its GA name) in the client's dialect."""
        return Send(json.dumps({"type": self.dialect.name(kind), "event_id": new_id("event"), **fields}, separators=(",", ":")))

    def _error(self, error: RealtimeError, event_id: str | None = None) -> Send:
        self.inner.speaking.observer.error(error.code)
        return self._event("error", error={"type": error.kind, "code": error.code, "message": str(error),
                                           "param": error.param, "event_id": event_id})

