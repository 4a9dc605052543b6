# The Triton image that `trtkit deploy k8s` names by default (trtkit-triton:<version>): NVIDIA's Triton
# TensorRT-LLM container with trtkit inside, since the repository's Python models (preprocessing,
# postprocessing, the BLS, stream_gate) import trtkit. Installed the GPU-host way (README, GPU hosts): nothing
# of the container moves (--no-deps, and pip held to the container's own freeze). From the checkout:
#   docker build -f docker/triton.Dockerfile -t trtkit-triton:0.1.0 .
# Multi-node (LeaderWorkerSet) pods also need kubectl in the image: add it in an image built FROM this one.
FROM nvcr.io/nvidia/tritonserver:26.04-trtllm-python-py3

WORKDIR /opt/trtkit
COPY pyproject.toml README.md ./
COPY requirements ./requirements
COPY trtkit ./trtkit

RUN pip list --format=freeze --exclude-editable > /tmp/container-constraints.txt \
    && pip install --no-cache-dir --no-deps --no-build-isolation . \
    && pip install --no-cache-dir -c /tmp/container-constraints.txt -r requirements/gpu-host.txt \
    && rm /tmp/container-constraints.txt \
    && useradd --uid 10001 --user-group --create-home --shell /usr/sbin/nologin trtkit

USER 10001
