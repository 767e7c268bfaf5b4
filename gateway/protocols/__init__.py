"""The protocols the gateway speaks: protocol v1 over WebSocket (its asyncio shell, its
sans-I/O session, the runners of its backend work), OpenAI's speech and transcription
APIs over HTTP (their shells and sans-I/O codecs)."""
