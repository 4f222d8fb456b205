"""duet's web page: static HTML, CSS and JavaScript served by the API app at ``/`` (no build step).

The page (``index.html`` + ``app.js``) lists the server's models from ``/v1/models`` (a selector; aliases left out)
and the chosen model's voices, sample rate, cloning, emotions and inline tags from ``/v1/audio/voices?model=``; next to
the text box, an emotion selector (sent as ``instructions``) and buttons that insert a tag (``[laughter]``) at the
caret, each disabled for a model that lacks it. It posts to ``/v1/audio/speech`` with ``stream_format="sse"``,
plays each PCM chunk through WebAudio as it arrives and offers the whole utterance as a WAV download (``wav.js``);
for a model that clones from a clip (``cloning``) it uploads or records a reference clip and sends it as
``reference_audio``, a 16-bit mono WAV at that model's rate (``clip.js``); in "type and hear" mode it opens a
``/v1/audio/speech/stream`` session and sends the text as it is typed, so each sentence is heard as soon as it is
finished. It talks to the public API only, so it is also a worked example of both streaming clients.
"""

from __future__ import annotations

from importlib import resources

from fastapi import FastAPI
from fastapi.responses import HTMLResponse, Response

JS = "text/javascript; charset=utf-8"
ASSETS = {"app.js": JS, "wav.js": JS, "clip.js": JS, "page.css": "text/css; charset=utf-8"}
ROUTES = ("/", *(f"/web/{name}" for name in ASSETS))
# Everything is same-origin; nothing is fetched from elsewhere.
_CSP = "default-src 'self'; connect-src 'self' blob:; media-src 'self' blob:"  # blob: is the WAV download
_HEADERS = {"Cache-Control": "no-cache", "Content-Security-Policy": _CSP, "X-Content-Type-Options": "nosniff"}


def _read(name: str) -> str:
    return resources.files(__package__).joinpath(name).read_text(encoding="utf-8")


def add_page(app: FastAPI) -> None:
    """Add ``GET /`` (the page) and ``GET /web/<asset>`` to ``app``; files are read once, here."""
    index = _read("index.html")
    assets = {name: _read(name) for name in ASSETS}

    @app.get("/", include_in_schema=False)
    async def page() -> HTMLResponse:
        return HTMLResponse(index, headers=_HEADERS)

    for name, media_type in ASSETS.items():
        def serve(body: str = assets[name], media_type: str = media_type) -> Response:
            return Response(body, media_type=media_type, headers=_HEADERS)

        app.add_api_route(f"/web/{name}", serve, methods=["GET"], include_in_schema=False)
