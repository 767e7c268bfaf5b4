"""The contract the server's processes share: the Triton models' (models), the voices a
server speaks (voices) and how text is cut into sentences (text). Protocol v1, which its
clients share too, is `speechstream.protocol`. Pure: no engine, no Triton, no network."""
