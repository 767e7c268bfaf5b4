"""Listen mode's recognizer stream: a connection's microphone audio to Triton's `asr`
model, one request per message on one gRPC stream, and the recognizer's events back.

The stream is named (STREAM_ID) so that the model keeps its state across the requests;
it lives as long as the connection listens, on the least loaded Triton that was up when
it opened. If it fails (Triton gone, the model failing), the connection is told and the
next audio opens a new stream, whose utterances are new turns.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
from collections.abc import AsyncIterator, Awaitable, Callable

import numpy as np

from contract import models as c
from gateway.backends.requests import BackendFailed, infer_input, on_backend
from gateway.backends.servers import Backends
from speechstream import protocol as v1

STOP_WAIT_S = 2.0  # how long a closing stream waits for the recognizer's last events

# (event, utterance key, where in the microphone's timeline in ms, text)
OnEvent = Callable[[str, object, int, str], Awaitable[None]]


class RecognitionFailed(BackendFailed):
    """A recognizer stream that failed, or did not answer its STOP."""

    code = v1.RECOGNITION_FAILED


class Recognition:
    """One recognizer stream of a connection."""

    _numbers = itertools.count(1)

    def __init__(self, backends: Backends, stream_id: str, endpoint_ms: int, at_ms: float, on_event: OnEvent,
                 partials: bool = True, smart_turn: bool = False) -> None:
        self.backends = backends
        self.stream_id = f"{stream_id}-{next(self._numbers)}"
        self.endpoint_ms = endpoint_ms
        self.at_ms = at_ms  # where the stream's timeline starts in the microphone's
        self.on_event = on_event
        self.partials = partials  # False: finals only (a file transcribed whole needs no partial)
        self.smart_turn = smart_turn  # the turn detector may end an utterance before the endpoint
        self._requests: asyncio.Queue[dict | None] = asyncio.Queue()
        self._stopped = asyncio.Event()  # the recognizer answered STOP whole
        self._ids = itertools.count()

    def hear(self, audio: np.ndarray | None, end: bool = False) -> None:
        """Send the next audio (int16 at ASR_SAMPLE_RATE), or the end of the utterance."""
        inputs = [infer_input(c.ENDPOINT_MS, np.array([self.endpoint_ms], np.int32))]
        if audio is not None and audio.size:
            inputs.append(infer_input(c.AUDIO, np.ascontiguousarray(audio, np.int16)))
        if end:
            inputs.append(infer_input(c.END, np.array([True])))
        if not self.partials:
            inputs.append(infer_input(c.PARTIALS, np.array([False])))
        if self.smart_turn:
            inputs.append(infer_input(c.SMART_TURN, np.array([True])))
        self._send(inputs)

    async def close(self, running: asyncio.Task) -> None:
        """STOP: the utterance in progress ends (its last events come first, for a
        while), then the stream (`running`, the task of `run`) goes."""
        if not running.done():
            self._send([infer_input(c.STOP, np.array([True]))], "stop")
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(asyncio.shield(self._stopped.wait()), STOP_WAIT_S)
        self._requests.put_nowait(None)
        running.cancel()
        with contextlib.suppress(asyncio.CancelledError, RecognitionFailed):
            await running

    async def finish(self, running: asyncio.Task, timeout_s: float) -> None:
        """STOP after the audio sent, and wait for every event it causes: a file
        transcribed whole, where `close` would cut a long backlog short. The requests
        end with the STOP, so Triton ends the stream once it has answered them all.
        RecognitionFailed if the recognizer fails, or has not answered within `timeout_s`."""
        self._send([infer_input(c.STOP, np.array([True]))], "stop")
        self._requests.put_nowait(None)
        try:
            await asyncio.wait_for(running, timeout_s)
        except asyncio.TimeoutError:  # not the builtin on Python 3.10
            raise RecognitionFailed(v1.RECOGNITION_FAILED, f"the speech recognizer did not finish within {timeout_s:g} s") from None
        if not self._stopped.is_set():
            raise RecognitionFailed(v1.BACKEND_UNAVAILABLE, "the speech recognizer's stream ended before its STOP's answer")

    def _send(self, inputs: list, request_id: str | None = None) -> None:
        inputs.insert(0, infer_input(c.STREAM_ID, np.array([self.stream_id.encode()], dtype=object)))
        self._requests.put_nowait({
            "model_name": c.ASR_MODEL, "inputs": inputs, "request_id": request_id or str(next(self._ids)),
            "parameters": {"triton_enable_empty_final_response": True},
        })

    async def _outgoing(self) -> AsyncIterator[dict]:
        while (request := await self._requests.get()) is not None:
            yield request

    async def run(self) -> None:
        """Send the requests and pass on the recognizer's events until the stream is
        closed; RecognitionFailed, with protocol v1's code, if it fails."""
        async with on_backend(self.backends, RecognitionFailed) as backend:
            async for result, error in backend.triton.stream_infer(self._outgoing()):
                if error is not None:
                    lost = any(fault in error.message() for fault in c.STUB_FAULTS)
                    code = v1.BACKEND_UNAVAILABLE if lost else v1.RECOGNITION_FAILED
                    raise RecognitionFailed(code, f"the speech recognizer failed: {error.message()}")
                response = result.get_response()
                if response.parameters["triton_final_response"].bool_param and response.id == "stop":
                    self._stopped.set()
                if result.as_numpy(c.EVENT) is None:
                    continue  # a request's empty final response
                await self.on_event(
                    result.as_numpy(c.EVENT)[0].decode(), (self.stream_id, int(result.as_numpy(c.UTTERANCE)[0])),
                    round(self.at_ms + int(result.as_numpy(c.AUDIO_MS)[0])), result.as_numpy(c.TEXT)[0].decode(),
                )
