"""The Thinker: a chat model on vLLM that writes a voice chat's replies, drafting them
while the user is still speaking (PredGen's input-time speculation)."""
