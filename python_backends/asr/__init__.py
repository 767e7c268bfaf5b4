"""The recognizer: a recognizer stream's audio in, its utterances' partial and final
transcripts out (Silero VAD finds the speech, Whisper tiny.en hears the words)."""
