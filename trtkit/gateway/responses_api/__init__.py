"""OpenAI's Responses API in the gateway: the request (``protocol``), the turn's prompt from the stored chain
(``turn_prompt``), input items (``items``), the response objects and events (``objects``, ``output``), the store
(``store``), the endpoint (``serving``) and its routes (``routes``)."""
