"""libespeak-ng through ctypes: one text's audio and, from the library's own events, where each phoneme and each
word lies in it.

The `espeak-ng` program writes audio only. Its library (`libespeak-ng.so.1`, the Debian package `libespeak-ng1`
that `espeak-ng` depends on) reports, in synchronous mode, events next to the samples it hands back: a WORD event
(the word's character position in the text) before each word it reads and, when initialised with phoneme events in
IPA, a PHONEME event (the phoneme's IPA, or an empty name for a pause) at the sample where each phoneme starts.
A phoneme ends where the next phoneme (or the END of the text) starts. These times are the synthesiser's own, so a
sidecar built from them is exact at the word boundaries, like Flite's and Piper's.

The library keeps global state, and its wave generator carries state from one text to the next (the same text read
after another comes out a little different); what it reads also depends on the memory of the process it runs in (a
library forked from a long-lived process, such as a test session that had run Piper and the speaker encoder, read a
text differently from the program). So the library runs in a reader process of its own (:class:`EspeakReader`,
one per process that asks: :func:`library`): a fresh interpreter that loads and initialises the library and then
only forks, one child per text, each child reading on that untouched state and leaving its reply in a file. Every
reading is then the program's (a fresh process per text), whatever the asking process did before, and a build is
repeatable.

    asking process --JSON line--> reader process --fork--> child: select, read -> reply file
                   <--JSON line--   (exit status, file)
"""

from __future__ import annotations

import ctypes
import json
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from duet.errors import DuetError, MissingDependency

SONAME = "libespeak-ng.so.1"
_AUDIO_OUTPUT_SYNCHRONOUS = 2
_INITIALIZE_PHONEME_EVENTS = 0x0001
_INITIALIZE_PHONEME_IPA = 0x0002
_POS_CHARACTER = 1
_CHARS_UTF8 = 1
_RATE, _PITCH = 1, 3  # espeak_PARAMETER
_LIST_TERMINATED, _WORD, _END, _PHONEME = 0, 1, 5, 7  # espeak_EVENT_TYPE
PAUSE = "_"  # the name a pause phoneme (no IPA) gets here


class _EventId(ctypes.Union):
    _fields_ = [("number", ctypes.c_int), ("name", ctypes.c_char_p), ("string", ctypes.c_char * 8)]


class _Voice(ctypes.Structure):  # espeak_VOICE (speak_lib.h)
    _fields_ = [("name", ctypes.c_char_p), ("languages", ctypes.c_void_p), ("identifier", ctypes.c_char_p),
                ("gender", ctypes.c_ubyte), ("age", ctypes.c_ubyte), ("variant", ctypes.c_ubyte),
                ("xx1", ctypes.c_ubyte), ("score", ctypes.c_int), ("spare", ctypes.c_void_p)]


class _Event(ctypes.Structure):  # espeak_EVENT (speak_lib.h)
    _fields_ = [("type", ctypes.c_int), ("unique_identifier", ctypes.c_uint), ("text_position", ctypes.c_int),
                ("length", ctypes.c_int), ("audio_position", ctypes.c_int), ("sample", ctypes.c_int),
                ("user_data", ctypes.c_void_p), ("id", _EventId)]


_Callback = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.POINTER(ctypes.c_short), ctypes.c_int, ctypes.POINTER(_Event))


@dataclass(frozen=True)
class Synthesis:
    """One text read by espeak-ng. Samples count from the start of ``audio``; ``words`` are espeak-ng's own words
    (it may read one written word as several, "3.50"), each with the phonemes that followed its WORD event."""

    audio: np.ndarray  # (N,) float32 in [-1, 1]
    sample_rate: int
    phonemes: tuple[tuple[str, int, int], ...]  # (IPA, or PAUSE; start sample, end sample)
    words: tuple[tuple[int, int, int], ...]  # (character offset in the text, first phoneme, end phoneme); -1, -1 if
    # the word has no phoneme that is not a pause


class EspeakLibrary:
    """libespeak-ng in this process, through ctypes: what the reader process's children run."""

    def __init__(self, soname: str = SONAME) -> None:
        try:
            self._lib = ctypes.CDLL(soname)
        except OSError as err:
            raise MissingDependency("libespeak-ng", "apt-get install espeak-ng") from err
        self.sample_rate = self._lib.espeak_Initialize(
            _AUDIO_OUTPUT_SYNCHRONOUS, 0, None, _INITIALIZE_PHONEME_EVENTS | _INITIALIZE_PHONEME_IPA)
        if self.sample_rate <= 0:
            raise MissingDependency("espeak-ng data", "apt-get install espeak-ng-data")
        self._files: dict[str, str] | None = None
        self._chunks: list[np.ndarray] = []
        self._events: list[tuple[int, int, int, str]] = []  # (type, text position, sample, phoneme name)
        self._callback = _Callback(self._receive)  # kept alive as long as the library may call it
        self._lib.espeak_SetSynthCallback(self._callback)

    def _receive(self, wav, n: int, events) -> int:
        if n > 0:
            self._chunks.append(np.ctypeslib.as_array(wav, shape=(n,)).copy())
        i = 0
        while events[i].type != _LIST_TERMINATED:
            e = events[i]
            name = bytes(e.id.string).split(b"\0")[0].decode("utf-8", "replace") if e.type == _PHONEME else ""
            self._events.append((e.type, e.text_position, e.sample, name))
            i += 1
        return 0

    def _languages(self) -> dict[str, str]:
        """Language name -> the voice file that speaks it with the highest priority (``en-gb`` -> ``gmw/en``)."""
        if self._files is None:
            self._lib.espeak_ListVoices.restype = ctypes.POINTER(ctypes.POINTER(_Voice))
            voices = self._lib.espeak_ListVoices(None)
            best: dict[str, tuple[int, str]] = {}
            i = 0
            while voices[i]:
                v = voices[i].contents
                k = v.languages  # (priority byte, name, NUL)..., ended by a zero priority byte
                while priority := ctypes.string_at(k, 1)[0]:
                    name = ctypes.string_at(k + 1)  # up to its NUL
                    if name.decode() not in best or priority < best[name.decode()][0]:
                        best[name.decode()] = (priority, v.identifier.decode())
                    k += len(name) + 2
                i += 1
            self._files = {name: file for name, (_, file) in best.items()}
        return self._files

    def _select(self, voice: str) -> str | None:
        """Select ``voice`` in this process (a child's: selecting queues events that the next reading in the same
        process would deliver first, crowding its own out of the library's event list)."""
        if self._lib.espeak_SetVoiceByName(voice.encode()) == 0:
            return voice
        language, plus, variant = voice.partition("+")
        file = self._languages().get(language)
        if file is None:
            return None
        resolved = file + plus + variant
        return resolved if self._lib.espeak_SetVoiceByName(resolved.encode()) == 0 else None

    def _read(self, text: str, voice: str, rate: int, pitch: int) -> bytes:
        """Synthesise in this process: a JSON line {"events": [...]} and then the int16 samples."""
        if self._select(voice) is None:
            raise RuntimeError(f"espeak-ng cannot select voice {voice}")
        self._lib.espeak_SetParameter(_RATE, int(rate), 0)
        self._lib.espeak_SetParameter(_PITCH, int(pitch), 0)
        self._chunks, self._events = [], []
        data = text.encode("utf-8")
        buf = ctypes.create_string_buffer(data)
        err = self._lib.espeak_Synth(buf, len(data) + 1, 0, _POS_CHARACTER, 0, _CHARS_UTF8, None, None)
        self._lib.espeak_Synchronize()
        if err != 0:
            raise RuntimeError(f"espeak_Synth failed with code {err}")
        samples = np.concatenate(self._chunks) if self._chunks else np.zeros(0, np.int16)
        return json.dumps({"events": self._events}).encode() + b"\n" + samples.astype("<i2").tobytes()


def _in_child(work: Callable[[], bytes], reply: Path) -> int:
    """``work()`` run in a forked child, its bytes (or its error's text) written to ``reply``; the child's exit
    status: 0 done, 1 failed, anything else died. The child exits without running the parent's clean-up, and the
    parent allocates nothing for the reply, so every child forks from the same state."""
    pid = os.fork()
    if pid == 0:
        try:
            data, code = work(), 0
        except BaseException as exc:  # noqa: BLE001 - reported to the asking process
            data, code = f"{type(exc).__name__}: {exc}".encode(), 1
        with open(reply, "wb") as f:
            f.write(data)
        os._exit(code)
    _, status = os.waitpid(pid, 0)
    return os.waitstatus_to_exitcode(status)


def serve(soname: str, folder: str) -> None:
    """The reader process (``python -m duet.data.sources.espeak_library SONAME FOLDER``): initialise the library,
    say so in one JSON line ({"sample_rate": N} or {"missing": [what, install hint]}), then for each request line on stdin
    ({"op": "select", "voice"} or {"op": "read", "text", "voice", "rate", "pitch"}) fork a child that answers into
    a file of ``folder`` and reply with one line {"code": exit status, "path": that file}."""
    out = sys.stdout
    try:
        try:
            lib = EspeakLibrary(soname)
        except MissingDependency as err:
            out.write(json.dumps({"missing": [err.what, err.install_hint]}) + "\n")
            out.flush()
            return
        out.write(json.dumps({"sample_rate": lib.sample_rate}) + "\n")
        out.flush()
        for n, line in enumerate(sys.stdin):  # until the asking process closes the pipe (or exits)
            request = json.loads(line)
            path = Path(folder) / f"{n}.reply"
            if request["op"] == "select":
                code = _in_child(lambda: (lib._select(request["voice"]) or "").encode(), path)
            else:
                code = _in_child(lambda: lib._read(request["text"], request["voice"], request["rate"],
                                                   request["pitch"]), path)
            out.write(json.dumps({"code": code, "path": str(path)}) + "\n")
            out.flush()
    finally:
        shutil.rmtree(folder, ignore_errors=True)  # an asking process that exits at once cleans up nothing


class EspeakReader:
    """The asking side: a reader process of this process's own (module docstring), started here."""

    def __init__(self) -> None:
        self._folder = tempfile.mkdtemp(prefix="duet-espeak-")  # the reader removes it when it stops
        self._proc = subprocess.Popen([sys.executable, "-m", "duet.data.sources.espeak_library", SONAME,
                                       self._folder], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        hello = json.loads(self._proc.stdout.readline() or "{}")
        if "sample_rate" not in hello:
            self.close()
            if "missing" in hello:
                raise MissingDependency(*hello["missing"])
            raise DuetError(f"the espeak-ng reader did not start (exit {self._proc.poll()})")
        self.sample_rate: int = hello["sample_rate"]
        self._known: dict[str, bool] = {}  # voice -> whether it can be selected

    def close(self) -> None:
        if self._proc.poll() is None:
            self._proc.stdin.close()
            self._proc.wait()

    def _ask(self, **request) -> bytes:
        """One request's reply bytes; RuntimeError if its child failed or died."""
        self._proc.stdin.write(json.dumps(request) + "\n")
        self._proc.stdin.flush()
        line = self._proc.stdout.readline()
        if not line:
            raise RuntimeError(f"the espeak-ng reader stopped (exit {self._proc.poll()})")
        answer = json.loads(line)
        path = Path(answer["path"])
        data = path.read_bytes() if path.is_file() else b""
        path.unlink(missing_ok=True)
        if answer["code"] == 1:
            raise RuntimeError(data.decode("utf-8", "replace"))
        if answer["code"] != 0:
            raise RuntimeError(f"espeak-ng died (exit {answer['code']})")
        return data

    def has_voice(self, voice: str) -> bool:
        """Whether the library can select ``voice`` as the program's `-v` takes it. The library takes a voice file
        (``gmw/en+m4``) or voice name with a variant; a language name (``en-gb``) it only selects through its
        properties, which drop the variant (the program speaks ``en-gb+m4`` as plain ``en-gb``), so a language is
        mapped to its voice file first (:meth:`EspeakLibrary._select`)."""
        if voice not in self._known:
            self._known[voice] = self._ask(op="select", voice=voice) != b""
        return self._known[voice]

    def synthesize(self, text: str, voice: str, pitch: int = 50, rate: int = 175) -> Synthesis:
        """``voice`` as the program's `-v` takes it (``en-us+f3``); ``pitch`` 0-99 and ``rate`` in words per minute
        as its `-p` and `-s`."""
        if not self.has_voice(voice):
            raise MissingDependency(f"espeak-ng voice {voice}", "apt-get install espeak-ng-data")
        reply = self._ask(op="read", text=text, voice=voice, rate=int(rate), pitch=int(pitch))
        header, _, samples = reply.partition(b"\n")
        events = json.loads(header)["events"]
        audio = np.frombuffer(samples, dtype="<i2").astype(np.float32) / 32768.0
        return Synthesis(audio, self.sample_rate, *_timeline([tuple(e) for e in events], len(audio)))


def _timeline(events, n_samples: int):
    """Library events -> phonemes (name, start, end) and words (text position, first phoneme, end phoneme): a
    word's phonemes are those between its WORD event and the next one, pauses at either end left out."""
    starts: list[tuple[str, int]] = []
    words: list[list[int]] = []
    end = n_samples
    for kind, position, sample, name in events:
        if kind == _WORD:
            words.append([position - 1, -1, -1])  # the library counts characters from 1
        elif kind == _PHONEME:
            starts.append((name or PAUSE, sample))
            if words and name:
                if words[-1][1] < 0:
                    words[-1][1] = len(starts) - 1
                words[-1][2] = len(starts)
        elif kind == _END:  # the end of a clause; the last one is the end of the speech
            end = sample
    end = min(max(end, starts[-1][1] if starts else 0), n_samples)
    stops = [s for _, s in starts[1:]] + [end]
    phonemes = tuple((name, min(s, n_samples), min(max(e, s), n_samples)) for (name, s), e in zip(starts, stops))
    return phonemes, tuple(tuple(w) for w in words)


_readers: dict[int, EspeakReader] = {}  # process id -> its reader (a forked worker starts its own)


def library() -> EspeakReader:
    """This process's espeak-ng reader (started on first use)."""
    pid = os.getpid()
    if pid not in _readers:
        _readers[pid] = EspeakReader()
    return _readers[pid]


def close_library() -> None:
    """Stop this process's reader; the next :func:`library` starts a new one (and loads the library again)."""
    reader = _readers.pop(os.getpid(), None)
    if reader is not None:
        reader.close()


if __name__ == "__main__":
    serve(sys.argv[1], sys.argv[2])
