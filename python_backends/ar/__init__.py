"""The autoregressive family: a Talker language model that writes audio-codec tokens,
and a codec decoder (Code2Wav) that turns frames of codes into audio."""
