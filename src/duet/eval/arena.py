"""A local listening arena (Luna-TTS §6.3): two anonymous samples of one utterance, the listener picks one.

``duet eval arena serve --runs RUN1 RUN2 ... --judgments FILE`` serves one page on 127.0.0.1. Each round draws
an utterance that at least two runs synthesised, two of those systems, and a random left/right order. The page
knows the pair only by an opaque id: audio comes from ``/audio/<pair>/left`` and ``/audio/<pair>/right``, so
neither the URLs nor the page reveal which system is which. The listener answers left, right or tie; the server
appends one JSON line per judgment to the judgments file::

    {"time": ..., "pair": ..., "utt": ..., "left": SYSTEM, "right": SYSTEM, "choice": "left" | "right" | "tie"}

and ``duet eval arena fit`` turns that file into Bradley-Terry ratings (:mod:`duet.eval.bradley_terry`).
A pair can be judged once; pairs live in memory, so a restarted server serves new ones.
"""

# No `from __future__ import annotations` here: FastAPI reads the request-body model from the handler's annotation,
# which must be the class itself, not a string naming a class local to create_app.
import json
import os
import random
import secrets
import threading
import time
from dataclasses import dataclass
from pathlib import Path

from duet.errors import DuetError
from duet.eval.bradley_terry import CHOICES


@dataclass(frozen=True)
class ArenaSystem:
    name: str
    wavs: Path  # the run's wavs/ directory


@dataclass(frozen=True)
class Pair:
    id: str
    utt: str
    text: str
    left: ArenaSystem
    right: ArenaSystem


def load_systems(run_dirs: list[str | Path]) -> tuple[list[ArenaSystem], dict[str, str]]:
    """Systems of the given runs and the target text of every utterance (from each run's test set)."""
    from duet.eval.testset import read_meta

    if len(run_dirs) < 2:
        raise DuetError("the arena needs at least two runs to compare")
    systems, texts = [], {}
    for d in run_dirs:
        d = Path(d)
        info_path = d / "run.json"
        if not info_path.is_file():
            raise DuetError(f"{d} is not a run directory (no run.json)")
        info = json.loads(info_path.read_text(encoding="utf-8"))
        systems.append(ArenaSystem(info["system"], d / "wavs"))
        test_set = read_meta(info["test_set"], check_files=False)
        for item in test_set.items:
            texts.setdefault(item.utt, item.target_text)
    names = [s.name for s in systems]
    if len(set(names)) != len(names):  # the same system twice (two settings): tell them apart by directory
        systems = [ArenaSystem(f"{s.name} ({Path(d).name})", s.wavs) for s, d in zip(systems, run_dirs)]
    return systems, texts


class Arena:
    """Pair drawing and judgment recording, independent of the web framework (thread-safe)."""

    def __init__(self, systems: list[ArenaSystem], texts: dict[str, str], judgments: str | Path,
                 seed: int | None = None):
        self.systems = systems
        self.texts = texts
        self.judgments = Path(judgments)
        self.rng = random.Random(seed)
        self.pairs: dict[str, Pair] = {}
        self.judged: set[str] = set()
        self._lock = threading.Lock()
        by_utt: dict[str, list[ArenaSystem]] = {}
        for s in systems:
            if s.wavs.is_dir():
                for wav in sorted(s.wavs.glob("*.wav")):
                    by_utt.setdefault(wav.stem, []).append(s)
        self.utterances = {u: ss for u, ss in sorted(by_utt.items()) if len(ss) >= 2}
        if not self.utterances:
            raise DuetError("no utterance was synthesised by two or more of the runs")
        self.judgments.parent.mkdir(parents=True, exist_ok=True)

    def next_pair(self) -> Pair:
        with self._lock:
            utt = self.rng.choice(list(self.utterances))
            left, right = self.rng.sample(self.utterances[utt], 2)  # random systems in random order
            pair = Pair(secrets.token_hex(8), utt, self.texts.get(utt, ""), left, right)
            self.pairs[pair.id] = pair
            return pair

    def audio_path(self, pair_id: str, side: str) -> Path:
        pair = self.pairs.get(pair_id)
        if pair is None or side not in ("left", "right"):
            raise KeyError(pair_id)
        return (pair.left if side == "left" else pair.right).wavs / f"{pair.utt}.wav"

    def judge(self, pair_id: str, choice: str) -> dict:
        if choice not in CHOICES:
            raise ValueError(f"choice must be one of {', '.join(CHOICES)}")
        with self._lock:
            pair = self.pairs.get(pair_id)
            if pair is None:
                raise KeyError(pair_id)
            if pair_id in self.judged:
                raise PermissionError(f"pair {pair_id} was already judged")
            record = {"time": time.time(), "pair": pair_id, "utt": pair.utt, "left": pair.left.name,
                      "right": pair.right.name, "choice": choice}
            with open(self.judgments, "a", encoding="utf-8") as f:
                f.write(json.dumps(record, ensure_ascii=False) + "\n")
                f.flush()
                os.fsync(f.fileno())
            self.judged.add(pair_id)
            return record


PAGE = """<!doctype html>
<html><head><meta charset="utf-8"><title>duet arena</title>
<style>
body{font-family:sans-serif;max-width:760px;margin:2em auto}
.samples{display:flex;gap:2em;margin:1em 0}.sample{flex:1;text-align:center}
button{font-size:1.1em;padding:.5em 1.2em;margin:.3em}#text{font-size:1.2em;margin:1em 0}
</style></head><body>
<h1>Which sounds better?</h1>
<p>Listen to both samples of the same sentence, then choose. The systems are hidden and the order is random.</p>
<div id="text"></div>
<div class="samples">
 <div class="sample"><h2>A (left)</h2><audio id="audio-left" controls preload="auto"></audio></div>
 <div class="sample"><h2>B (right)</h2><audio id="audio-right" controls preload="auto"></audio></div>
</div>
<div>
 <button id="choose-left" disabled>A is better</button>
 <button id="choose-tie" disabled>About the same</button>
 <button id="choose-right" disabled>B is better</button>
</div>
<p id="status"></p><p>Judged in this session: <span id="count">0</span></p>
<script>
let pair = null;
const buttons = ["left", "tie", "right"].map(c => document.getElementById("choose-" + c));
async function next() {
  buttons.forEach(b => b.disabled = true);
  const r = await fetch("/api/pair");
  if (!r.ok) { document.getElementById("status").textContent = "no pair: " + r.status; return; }
  pair = await r.json();
  document.getElementById("text").textContent = pair.text;
  document.getElementById("audio-left").src = pair.left;
  document.getElementById("audio-right").src = pair.right;
  buttons.forEach(b => b.disabled = false);
  document.body.dataset.pair = pair.pair;
}
async function choose(choice) {
  if (!pair) return;
  buttons.forEach(b => b.disabled = true);
  const r = await fetch("/api/judge", {method: "POST", headers: {"Content-Type": "application/json"},
                                       body: JSON.stringify({pair: pair.pair, choice: choice})});
  if (r.ok) {
    const n = document.getElementById("count");
    n.textContent = String(Number(n.textContent) + 1);
    document.getElementById("status").textContent = "recorded";
  } else {
    document.getElementById("status").textContent = "not recorded: " + r.status;
  }
  await next();
}
["left", "tie", "right"].forEach(c => document.getElementById("choose-" + c).onclick = () => choose(c));
next();
</script></body></html>
"""


def create_app(arena: Arena):
    """The FastAPI app: ``/`` (page), ``/api/pair``, ``/api/judge``, ``/audio/{pair}/{side}``."""
    from fastapi import FastAPI, HTTPException
    from fastapi.responses import FileResponse, HTMLResponse
    from pydantic import BaseModel

    class Judgment(BaseModel):
        pair: str
        choice: str

    app = FastAPI(title="duet arena", docs_url=None, redoc_url=None, openapi_url=None)

    @app.get("/", response_class=HTMLResponse)
    def page() -> str:
        return PAGE

    @app.get("/api/pair")
    def pair() -> dict:
        p = arena.next_pair()
        return {"pair": p.id, "text": p.text, "left": f"/audio/{p.id}/left", "right": f"/audio/{p.id}/right"}

    @app.get("/audio/{pair_id}/{side}")
    def audio(pair_id: str, side: str) -> FileResponse:
        try:
            path = arena.audio_path(pair_id, side)
        except KeyError as err:
            raise HTTPException(404, "unknown pair or side") from err
        if not path.is_file():
            raise HTTPException(404, "audio is gone")
        return FileResponse(path, media_type="audio/wav")  # no filename: it would name the system

    @app.post("/api/judge")
    def judge(body: Judgment) -> dict:
        try:
            arena.judge(body.pair, body.choice)
        except ValueError as err:
            raise HTTPException(422, str(err)) from err
        except KeyError as err:
            raise HTTPException(404, "unknown pair") from err
        except PermissionError as err:
            raise HTTPException(409, str(err)) from err
        return {"ok": True}

    return app
