"""Which path a request takes to the served model, chosen by its metadata: the text path to the ensemble or
``tensorrt_llm_bls`` (``protocol.py``), or the token path to the engine model (``token_path.py``). Both Triton
upstreams use one of these, so the exchange around them stays one."""

from __future__ import annotations

from dataclasses import dataclass

import tritonclient.grpc as grpcclient

from trtkit.errors import ClientError
from trtkit.governance.governor import PreparedRequest
from trtkit.governance.tokens import TokenCounter, TokenIdsPrompt
from trtkit.governance.upstream import Delta
from trtkit.transport.triton.protocol import (
    declared_inputs,
    is_final_response,
    parse_response,
    request_inputs,
    response_arrays,
)
from trtkit.transport.triton.token_path import TokenPath, TokenReader, is_engine_model

Request = tuple[list[grpcclient.InferInput], list[grpcclient.InferRequestedOutput] | None]


@dataclass(slots=True, frozen=True)
class TextReader:
    tokens_per_block: int = 0

    def read(self, result: grpcclient.InferResult) -> Delta:
        return parse_response(response_arrays(result).get, is_final_response(result), self.tokens_per_block)


@dataclass(slots=True)
class TextPath:
    """The ensemble / ``tensorrt_llm_bls``: text in, text out; the server tokenizes and detokenizes."""

    declared: dict[str, str]
    tokens_per_block: int = 0  # reads a GPU ensemble's kv_cache_reused_blocks as cached prompt tokens

    def request(self, request: PreparedRequest, *, stream: bool) -> Request:
        if isinstance(request.prompt, TokenIdsPrompt):
            raise ClientError("a prompt given as token ids needs the engine model, which takes ids: open the client "
                              "with model_name='tensorrt_llm' (the ensemble and the BLS take text)")
        return request_inputs(request.prompt, request.params, stream=stream, declared=self.declared), None

    def reader(self, request: PreparedRequest) -> TextReader:
        return TextReader(self.tokens_per_block)


@dataclass(slots=True)
class EnginePath:
    """The engine model: the governor's prompt ids in, token ids out, read as the BLS reads them."""

    tokens: TokenPath

    def request(self, request: PreparedRequest, *, stream: bool) -> Request:
        if not request.prompt_ids or (not isinstance(request.prompt, TokenIdsPrompt) and not request.prompt.strip()):
            raise ClientError("text_input is empty; send a non-empty prompt")  # what preprocessing refuses
        return self.tokens.request(request.prompt_ids, request.params, stream=stream)

    def reader(self, request: PreparedRequest) -> TokenReader:
        return self.tokens.reader(request.prompt_ids, request.params)


RequestPath = TextPath | EnginePath


def path_for(metadata: dict, counter: TokenCounter, tokens_per_block: int) -> RequestPath:
    """The path to the model ``metadata`` (``get_model_metadata(as_json=True)``) describes."""
    if is_engine_model(metadata):
        return EnginePath(TokenPath(metadata, counter, tokens_per_block))
    return TextPath(declared_inputs(metadata), tokens_per_block)
