"""Through third-party frameworks: the voice-agent plugins against our own client, and Locust's users."""
