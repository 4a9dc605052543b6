"""An OpenAI-compatible HTTP server as an upstream of the governed client (trtllm-serve, Dynamo's frontend, vLLM,
llama.cpp's llama-server, another trtkit gateway): the upstream (``upstream``), its HTTP/1.1 pool (``http1``), its
events (``events``), how it fails (``errors``) and what it serves (``served_models``)."""
