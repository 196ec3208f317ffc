"""`toycards serve`: one GGUF model behind an OpenAI-compatible HTTP API (needs the `serve` extra).

The modules, in the order a request meets them:

    server.py     the socket, uvicorn, and stopping cleanly on SIGINT or SIGTERM
    app.py        the Starlette routes, body caps, tokenizing off the event loop, JSON and SSE replies
    protocol.py   OpenAI's request fields checked into plain values, its reply and error shapes
    scheduler.py  the one thread that runs the model: a FIFO queue, several replies in turns
    sequence.py   one reply, step by step, as `ModelAPI.generate` computes it; stop strings

Only this package imports starlette, uvicorn and anyio; `toycards.cli.serve` imports it when the
command runs.
"""
