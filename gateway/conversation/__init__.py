"""The conversation, sans I/O: speaking (contexts and their audio), chatting (chat turns
and their speculation), listening (the microphone and its utterances), and the rules
they share (sentences, SSML, the start gate, audio framing, the actions for the shell)."""
