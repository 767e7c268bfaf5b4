"""Speech synthesis stages served by Triton's Python backend, importable without Triton."""
