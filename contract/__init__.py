"""The contract every process shares: the Triton models' (models), protocol v1's
(protocol), the voices a server speaks (voices) and how text is cut into sentences (text).
Pure: no engine, no Triton, no network."""
