"""The WebSocket gateway: protocol v1 to clients, gRPC streams to Triton's `tts`."""
