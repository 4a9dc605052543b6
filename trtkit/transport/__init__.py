"""The clients that carry governed requests to tritonserver over gRPC: ``TritonLLMClient`` (a stream per
request) and ``AsyncTritonLLMClient`` (every request on one kept call, ``stream_mux``), the text path to the
ensemble or ``tensorrt_llm_bls`` and the token path to the engine model (``token_wire``).

    from trtkit.governance import SamplingParams
    from trtkit.transport import TritonLLMClient
    with TritonLLMClient("127.0.0.1:8001", config=load_config("model_configs/tiny-llama.yaml")) as client:
        result = client.generate("Hello", SamplingParams(max_tokens=16))
"""

from trtkit.transport.triton.aio_upstream import AsyncTritonLLMClient
from trtkit.transport.triton.grpc_upstream import TritonLLMClient
from trtkit.transport.triton.retry import ServerUnavailableError

__all__ = ["AsyncTritonLLMClient", "TritonLLMClient", "ServerUnavailableError"]
