"""Triton's gRPC server as an upstream of the governed client: the blocking upstream (a stream per request,
``grpc_upstream``) and the asyncio one (every request on one kept call, ``aio_upstream`` over ``stream_mux``), the
exchange both decide by (``exchange``), and the request paths: text to the ensemble or the BLS (``protocol``), token
ids to the engine model (``token_path``), chosen by the served model (``request_path``)."""
