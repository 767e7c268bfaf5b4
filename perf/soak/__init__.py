"""Soak: mixed WebSocket load at about half of capacity; errors, leaks and memory growth.

    python -m perf.soak --duration 600
    python -m perf.soak --duration 600 --chaos vocoder  # and a stage fault every 60 s: vocoder, tts or all

Starts its own tritonserver and gateway on free loopback ports. A short calibration
(concurrent `speak`s read as fast as possible) measures capacity C in audio-seconds per
wall second; then round(C / 2) listeners (or --clients) each speak random Harvard texts
(one sentence, or eight as in the "paragraph" workload) over protocol v1 and consume the
audio in real time like a player, so each is a load of 1 audio-s/s. Per utterance a
listener may cancel it or drop its TCP connection without a close handshake, then
reconnect. Each listener's player (perf.playback's model) counts its stalls: the times it
had nothing to play once playing. Afterwards it reports errors, stalls (how many, how many
over 1.5 s, the longest), tts requests Triton still holds, shared-memory
segments left in /dev/shm, the resident memory growth of the gateway and of Triton (with
its Python backend stubs) after warm-up, and whether Triton then stops cleanly; as a
Markdown table on stdout and as soak.json and soak.md in --out, exiting with 1 when a
goal of zero (errors, leaks) is missed. --duration bounds calibration plus soak (600 s
at most); start-up and shut-down add half a minute to a minute.

With --chaos SET, Triton runs supervised as under speechstream-serve, and every
--fault-every seconds a stage fault of perf.chaos.FAULT_SETS[SET] strikes in turn:
`vocoder`, a vocoder stub killed or stopped for 3 s, which the failover hides (goal: no
error, no stall over 1.5 s); `tts`, the tts stub, the acoustic stub or tritonserver
killed, which the gateway resumes from (goal: every stream done, those it resumed within
its bound; an error after `resuming` is reported as such); `all` (--chaos alone), each of
the five in turn. Every error counts; a stream that hangs (no message for 30 s) counts as
hung. Streams end done (of them, resumed: a `resuming` came), errored or hung. Stalls are
also counted around the faults (those under way within AROUND_S after one) and elsewhere.
It reports each fault's recovery time (until a new utterance is spoken whole) and longest
stall, in soak-chaos-SET.json and .md (soak-chaos.* for `all`).
"""
