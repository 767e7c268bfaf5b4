"""A connection's backend work, one runner per kind: synthesis jobs, Thinker requests
and the recognizer stream. Each runs its tasks against the backends, hands what comes
back to the connection's session as events, and carries out what the session answers
through the connection's shell (`Shell.act`). Each kind fails with its own type
(SynthesisFailed, ThinkingFailed, RecognitionFailed); a task's ending — done, failed,
failed unexpectedly, or gone with its client — is written once (`Tasks.run`).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable
from contextlib import aclosing
from typing import Protocol

import numpy as np

from gateway.backends.recognition import Recognition, RecognitionFailed
from gateway.backends.requests import BackendFailed
from gateway.backends.servers import Backends
from gateway.backends.synthesis import Resuming, SynthesisFailed, Synthesizer
from gateway.backends.thinking import Thinker, ThinkingFailed
from gateway.conversation.actions import Action, Hear, Job, Send, Think
from gateway.messages import Config
from speechstream import protocol as v1

log = logging.getLogger("speechstream.gateway")

# After a recognizer stream fails, the microphone's audio is dropped this long before a
# new stream is tried: one error per failure, not one per message.
RECOGNIZER_RETRY_S = 1.0


class ConnectionClosed(Exception):
    """The client's connection is closed or closing: nothing more goes either way."""


class JobUnwanted(Exception):
    """The job's context was cancelled, failed or closed while it waited to send."""


class Events(Protocol):
    """The session, as the runners tell it what their backends answered."""

    id: str
    config: Config

    def audio(self, job_id: int, pcm: np.ndarray, sentence_index: int, words: list[tuple[str, int, int]]) -> list[Action]: ...
    def resuming(self, job_id: int, code: str, message: str, within_s: float) -> list[Action]: ...
    def finished(self, job_id: int) -> list[Action]: ...
    def failed(self, job_id: int, code: str, message: str) -> list[Action]: ...
    def thought(self, think_id: int, ids: list[int], text: str, accepted: int | None) -> list[Action]: ...
    def thought_done(self, think_id: int) -> list[Action]: ...
    def thought_failed(self, think_id: int, code: str, message: str) -> list[Action]: ...
    def recognized(self, kind: str, utterance: object, audio_ms: int, text: str) -> list[Action]: ...
    def error(self, code: str, message: str, context_id: str | None = None, retry_after_ms: int | None = None) -> Send: ...


class Shell(Protocol):
    """The connection's I/O: carry out actions, those of job `job_id` only while it is
    wanted (JobUnwanted once not); ConnectionClosed once the client is gone."""

    async def act(self, actions: list[Action], job_id: int | None = None) -> None: ...
    def unread_s(self) -> float: ...


class Tasks:
    """The tasks of one kind of backend work on a connection, by id."""

    failure: type[BackendFailed]
    kind: str  # what a task is, for the log
    doing: str  # what a task does, for the client's internal_error

    def __init__(self, session: Events, shell: Shell) -> None:
        self.session = session
        self.shell = shell
        self.running: dict[int, asyncio.Task] = {}

    def stop(self, task_id: int) -> None:
        if task := self.running.pop(task_id, None):
            task.cancel()

    async def run(self, task_id: int, work: Callable[[], Awaitable[None]], done: Callable[[], list[Action]],
                  failed: Callable[[str, str], list[Action]]) -> None:
        """Do `work`, then carry out what the session answers to its end: `done`, or
        `failed` with the failure's code and message; nothing once the client is gone."""
        try:
            await work()
            after = done()
        except self.failure as e:
            after = failed(e.code, e.message)
        except (ConnectionClosed, JobUnwanted):
            return
        except Exception:
            log.exception("session %s: %s %d failed unexpectedly", self.session.id, self.kind, task_id)
            after = failed(v1.INTERNAL_ERROR, f"the server failed while {self.doing}")
        finally:
            self.running.pop(task_id, None)
        with contextlib.suppress(ConnectionClosed):
            await self.shell.act(after)


class SynthesisRunner(Tasks):
    """The connection's synthesis jobs: each job's audio to the session as it comes."""

    failure = SynthesisFailed
    kind, doing = "job", "speaking this context"

    def __init__(self, session: Events, shell: Shell, synthesizer: Synthesizer, client: str) -> None:
        super().__init__(session, shell)
        self.synthesizer = synthesizer
        self.client = client  # its address, for the servers' fair share

    def start(self, job: Job) -> None:
        self.running[job.id] = asyncio.create_task(
            self.run(job.id, lambda: self._speak(job), lambda: self.session.finished(job.id),
                     lambda code, message: self.session.failed(job.id, code, message)))

    async def _speak(self, job: Job) -> None:
        # Closed at once when this task is cancelled (Stop), which cancels the request in Triton.
        speech = self.synthesizer.synthesize(
            job.sentences, job.voice_params, self.client, job.voice, mid_stream=job.start_ms > 0,  # its context spoke before
            unread=self.shell.unread_s,
        )
        async with aclosing(speech) as chunks:
            async for chunk in chunks:
                if isinstance(chunk, Resuming):
                    await self.shell.act(self.session.resuming(job.id, chunk.code, chunk.message, chunk.within_s), job.id)
                else:
                    await self.shell.act(self.session.audio(job.id, chunk.pcm, chunk.sentence_index, chunk.words), job.id)


class ThinkingRunner(Tasks):
    """The connection's Thinker requests (chat mode): each piece of a reply to the session."""

    failure = ThinkingFailed
    kind, doing = "Thinker request", "writing this reply"

    def __init__(self, session: Events, shell: Shell, thinker: Thinker) -> None:
        super().__init__(session, shell)
        self.thinker = thinker

    def start(self, think: Think) -> None:
        self.running[think.id] = asyncio.create_task(
            self.run(think.id, lambda: self._think(think), lambda: self.session.thought_done(think.id),
                     lambda code, message: self.session.thought_failed(think.id, code, message)))

    async def _think(self, think: Think) -> None:
        reply = self.thinker.reply(think.messages, think.draft, think.top_k, think.max_tokens, think.temperature,
                                   think.prefix, think.seed)
        # Closed at once when this task is cancelled (StopThinking), which aborts the request in vLLM.
        async with aclosing(reply) as pieces:
            async for piece in pieces:
                await self.shell.act(self.session.thought(think.id, piece.ids, piece.text, piece.accepted))


class RecognitionRunner:
    """The connection's recognizer stream (listen mode): opened by the first audio, and
    again by the first audio a while after it failed."""

    def __init__(self, session: Events, shell: Shell, backends: Backends) -> None:
        self.session = session
        self.shell = shell
        self.backends = backends
        self.recognizer_stream: tuple[Recognition, asyncio.Task] | None = None
        self.retry_at = 0.0  # after a failure, no new stream before this (loop time)

    def hear(self, hear: Hear) -> None:
        """The microphone's audio to the recognizer stream."""
        if self.recognizer_stream is None or self.recognizer_stream[1].done():
            if hear.audio is None or asyncio.get_running_loop().time() < self.retry_at:
                return  # nothing heard to end, or the last stream failed just now
            listen = self.session.config.listen
            recognition = Recognition(self.backends, self.session.id, listen.endpoint_ms, hear.at_ms, self._recognized,
                                      smart_turn=listen.turn_detection == "smart")
            self.recognizer_stream = recognition, asyncio.create_task(self._run(recognition))
        self.recognizer_stream[0].hear(hear.audio, hear.end)

    async def close(self) -> None:
        if self.recognizer_stream is not None:
            await self.recognizer_stream[0].close(self.recognizer_stream[1])

    async def _run(self, recognition: Recognition) -> None:
        """Run the recognizer stream; its failure is the client's `error`."""
        try:
            await recognition.run()
        except RecognitionFailed as e:
            self.retry_at = asyncio.get_running_loop().time() + RECOGNIZER_RETRY_S
            with contextlib.suppress(ConnectionClosed):
                await self.shell.act([self.session.error(e.code, e.message)])

    async def _recognized(self, kind: str, utterance: object, audio_ms: int, text: str) -> None:
        with contextlib.suppress(ConnectionClosed):
            await self.shell.act(self.session.recognized(kind, utterance, audio_ms, text))
