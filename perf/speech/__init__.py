"""The streaming speech service under load: the benchmark against the compute limit and the peers; one stream."""
