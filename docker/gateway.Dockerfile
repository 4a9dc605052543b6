# The gateway image that `trtkit deploy k8s` names by default (trtkit-gateway:<version>). From the checkout:
#   docker build -f docker/gateway.Dockerfile -t trtkit-gateway:0.1.0 .
# Its pods run `trtkit gateway CONFIG --backend <triton service>:8001`, as user 10001 with a read-only root;
# they write only $TRTKIT_HOME and /tmp (emptyDirs in the manifests).
FROM python:3.12-slim-bookworm

ENV PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1

WORKDIR /opt/trtkit
COPY pyproject.toml README.md ./
COPY trtkit ./trtkit

# trtkit's dependencies name torch (the CPU engine's); the gateway never imports it, but pip resolves it: take
# the CPU build from PyTorch's CPU index, never the multi-GB CUDA one.
RUN pip install --no-cache-dir --extra-index-url https://download.pytorch.org/whl/cpu . \
    && useradd --uid 10001 --user-group --no-create-home --home-dir /var/lib/trtkit --shell /usr/sbin/nologin trtkit \
    && mkdir -p /var/lib/trtkit \
    && chown 10001:10001 /var/lib/trtkit

USER 10001
ENV TRTKIT_HOME=/var/lib/trtkit \
    HF_HUB_OFFLINE=1
EXPOSE 8080
ENTRYPOINT ["trtkit"]
CMD ["gateway", "--help"]
