"""The voice chat and the recognizer: a spoken or typed question to its spoken reply, and what hearing costs."""
