"""A small SSML subset: pauses, pace and spoken aliases marked in the text (``duet speak``, the speech API, the
text-streaming WebSocket).

Text is read as SSML only when it starts (after whitespace) with a ``<speak>`` element; any other text is plain,
whatever ``<`` or ``&`` it holds. The subset (SSML 1.1 names; anything else is an error naming its position):

``<speak>`` ... ``</speak>``
    the root; its ``version``, ``xmlns`` and ``xml:lang`` attributes are accepted and ignored. Only whitespace may
    follow it.
``<break time="300ms"/>``, ``<break time="1.5s"/>``, ``<break strength="strong"/>``
    a pause of that length (at most :data:`MAX_BREAK_SECONDS`); ``strength`` is one of :data:`STRENGTHS`
    (``none`` 0 ... ``x-strong`` 1 s), ``time`` wins when both are given, and a bare ``<break/>`` is ``medium``.
    Always empty (``<break .../>``); a break between two letters of one word is refused.
``<prosody rate="...">`` ... ``</prosody>``
    the words inside spoken at that rate: a keyword of :data:`RATES`, a percentage of the normal rate (``"80%"``),
    a relative change (``"+20%"``, ``"-10%"``) or a multiplier (``"1.2"``); nested rates multiply, and the product
    stays within :data:`MIN_RATE` .. :data:`MAX_RATE`. Other prosody attributes (pitch, volume) are refused.
``<sub alias="World Wide Web">WWW</sub>``
    the alias is spoken (and reported in word timings) instead of the text inside, which must be plain text.

Character references ``&amp; &lt; &gt; &quot; &apos; &#N; &#xH;`` are decoded; comments ``<!-- -->`` are skipped.

What a document becomes (:class:`Marked`): its plain text, whitespace collapsed, and the marks over it. A mark's
place is counted in non-whitespace characters of the plain text before it, so the text can be cut into pieces
(``duet.text.sentences``, ``duet.text.segmenter``: both keep every non-whitespace character, in order) and each
piece finds its marks without caring how its whitespace was collapsed. How a model realises the marks is
``duet.tts.pace``'s job.

:class:`SsmlReader` reads a document that arrives in deltas (an LLM's token stream): it hands out plain text as soon
as it is certain, holding back only an unfinished tag or character reference; :func:`parse_ssml` reads a whole one
through the same reader. Errors are :class:`SsmlError` (an ``InvalidRequest`` with ``code`` "invalid_ssml"), whose
message names the character where the problem starts: ``SSML error at character 17: ...``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from duet.errors import InvalidRequest

MAX_BREAK_SECONDS = 10.0  # as most SSML engines (Amazon Polly, Azure) bound a break
STRENGTHS = {"none": 0.0, "x-weak": 0.1, "weak": 0.25, "medium": 0.4, "strong": 0.7, "x-strong": 1.0}
RATES = {"x-slow": 0.6, "slow": 0.8, "medium": 1.0, "default": 1.0, "fast": 1.25, "x-fast": 1.5}
MIN_RATE, MAX_RATE = 0.25, 4.0  # as duet.limits bounds a request's speed
_ROOT_ATTRIBUTES = frozenset({"version", "xmlns", "xml:lang", "xmlns:xsi", "xsi:schemaLocation"})
_ENTITIES = {"amp": "&", "lt": "<", "gt": ">", "quot": '"', "apos": "'"}
_NAME = re.compile(r"[A-Za-z_][\w.:-]*")
_ATTRIBUTE = re.compile(r"\s+([A-Za-z_][\w.:-]*)\s*=\s*(\"[^\"<]*\"|'[^'<]*')")
_TIME = re.compile(r"\s*(\d+(?:\.\d*)?|\.\d+)\s*(ms|s)\s*")
_PERCENT = re.compile(r"\s*([+-]?)(\d+(?:\.\d*)?|\.\d+)\s*%\s*")
_NUMBER = re.compile(r"\s*(\d+(?:\.\d*)?|\.\d+)\s*")
_MAX_REFERENCE = 12  # characters of "&...;" before it is not a character reference


class SsmlError(InvalidRequest):
    """Malformed or unsupported markup; ``position`` is the character of the input where it starts."""

    def __init__(self, position: int, problem: str):
        super().__init__(f"SSML error at character {position}: {problem}", param="input", code="invalid_ssml")
        self.position = position


@dataclass(frozen=True)
class Break:
    at: int  # non-whitespace characters of the plain text before the pause
    seconds: float


@dataclass(frozen=True)
class Rate:
    start: int  # the span's non-whitespace characters of the plain text: [start, end)
    end: int
    rate: float  # > 1 faster


@dataclass(frozen=True)
class Marked:
    """A document's plain text (whitespace collapsed) and its marks, in order of ``at`` / ``start``."""

    text: str
    breaks: tuple[Break, ...] = ()
    rates: tuple[Rate, ...] = ()

    @property
    def plain(self) -> bool:
        return not self.breaks and not self.rates


def is_ssml(text: str) -> bool:
    """Whether ``text`` is read as SSML: it starts, after whitespace, with a ``<speak>`` start tag."""
    return re.match(r"\s*<speak[\s/>]", text) is not None


def parse_ssml(text: str) -> Marked:
    """A whole SSML document -> its :class:`Marked` text; an :class:`SsmlError` for bad markup."""
    reader = SsmlReader()
    plain = reader.push(text)
    reader.finish()
    return Marked(" ".join(plain.split()), tuple(reader.breaks), reader.rate_spans())


def read_text(text: str) -> Marked:
    """``text`` as a speaker reads it: SSML when :func:`is_ssml`, else plain (whitespace collapsed, no marks)."""
    return parse_ssml(text) if is_ssml(text) else Marked(" ".join(text.split()))


class SsmlReader:
    """An SSML document read in deltas: ``push`` returns the plain text that became certain, ``finish`` checks the
    end. ``breaks`` and :meth:`rate_spans` hold the marks read so far (an open ``<prosody>`` reaches the text read
    so far)."""

    def __init__(self) -> None:
        self.breaks: list[Break] = []
        self._rates: list[Rate] = []  # closed spans of one constant rate (nested rates multiplied), != 1
        self._stack: list[tuple[str, float, int]] = []  # open elements: (name, rate product, where it opened)
        self._held = ""  # raw input not yet read (an unfinished tag or reference)
        self._offset = 0  # input characters before ``_held``
        self._chars = 0  # non-whitespace characters of plain text handed out
        self._rate_start = 0  # where the current rate began
        self._state = "before"  # before <speak>, inside it, or after it
        self._sub: int | None = None  # where an open <sub> started: its content is not spoken
        self._glued: int | None = None  # a break right after a letter, at this input position
        self._last = " "  # the last plain character handed out

    # ---- the marks ----
    @property
    def rate(self) -> float:
        return self._stack[-1][1] if self._stack else 1.0

    def rate_spans(self) -> tuple[Rate, ...]:
        spans = list(self._rates)
        if self.rate != 1.0 and self._chars > self._rate_start:
            spans.append(Rate(self._rate_start, self._chars, self.rate))
        return tuple(spans)

    # ---- reading ----
    def push(self, delta: str) -> str:
        self._held += delta
        out: list[str] = []
        while self._held:
            used = self._step(out)
            if used == 0:
                break
            self._offset += used
            self._held = self._held[used:]
        return "".join(out)

    def finish(self) -> None:
        """The end of the document: an :class:`SsmlError` if it is unfinished."""
        if self._held.strip():
            raise SsmlError(self._offset, f"unfinished markup {self._held[:20]!r}")
        if self._state == "before":
            raise SsmlError(self._offset, "the document has no <speak> element")
        if self._state == "inside":
            name, _, at = self._stack[-1] if self._stack else ("speak", 1.0, 0)
            raise SsmlError(at, f"<{name}> is never closed")

    def _step(self, out: list[str]) -> int:
        """Read what starts ``_held``: -> characters used (0: wait for more input)."""
        held, at = self._held, self._offset
        if held[0] == "<":
            if held.startswith("<!--"):
                end = held.find("-->")
                return 0 if end < 0 else end + 3
            if len(held) < 4 and "<!--".startswith(held):
                return 0
            if len(held) > 1 and not (held[1] in "/_" or held[1].isalpha()):
                raise SsmlError(at, "a bare '<': write &lt; for the character")
            end = _tag_end(held)
            if end < 0:
                return 0
            self._tag(held[: end + 1], at, out)
            return end + 1
        if self._state != "inside":
            i = len(held) - len(held.lstrip())
            if i:
                return i
            where = "before <speak>" if self._state == "before" else "after </speak>"
            raise SsmlError(at, f"text {held[:12]!r} {where}; SSML text goes inside <speak>...</speak>")
        if held[0] == "&":
            end = held.find(";", 1, _MAX_REFERENCE)
            if end < 0:
                if len(held) < _MAX_REFERENCE and re.fullmatch(r"&#?\w*", held):
                    return 0
                raise SsmlError(at, "a bare '&': write &amp;")
            self._text(_reference(held[: end + 1], at), at, out)
            return end + 1
        end = min((i for i in (held.find("<"), held.find("&")) if i >= 0), default=len(held))
        self._text(held[:end], at, out)
        return end

    def _text(self, text: str, at: int, out: list[str]) -> None:
        if self._sub is not None:
            return  # a <sub>'s own text is replaced by its alias
        for ch in text:
            self._emit(ch, at, out)

    def _emit(self, ch: str, at: int, out: list[str]) -> None:
        if self._glued is not None and ch.isalnum():
            raise SsmlError(self._glued, "a <break> inside a word; put it between words")
        self._glued = None
        out.append(ch)
        self._last = ch
        if not ch.isspace():
            self._chars += 1

    def _tag(self, tag: str, at: int, out: list[str]) -> None:
        if not tag.endswith(">"):
            raise SsmlError(at, f"a bare '<' or a malformed tag {tag[:20]!r}: write &lt; for the character")
        closing = tag.startswith("</")
        empty = tag.endswith("/>")
        m = _NAME.match(tag, 2 if closing else 1)
        if m is None:
            raise SsmlError(at, f"a bare '<' or a malformed tag {tag[:20]!r}: write &lt; for the character")
        name = m.group(0)
        rest = tag[m.end(): -2 if empty else -1]
        if closing:
            if rest.strip() or empty:
                raise SsmlError(at, f"malformed end tag {tag[:30]!r}")
            self._close(name, at)
            return
        attributes = _attributes(rest, at)
        if self._state == "before":
            if name != "speak":
                raise SsmlError(at, f"the document must start with <speak>, not <{name}>")
            self._check_attributes(name, attributes, _ROOT_ATTRIBUTES, at)
            if empty:
                self._state = "after"
                return
            self._state = "inside"
            self._stack.append(("speak", 1.0, at))
            return
        if self._state == "after":
            raise SsmlError(at, f"<{name}> after </speak>")
        if self._sub is not None:
            raise SsmlError(at, f"<{name}> inside <sub>: its content is plain text")
        if name == "break":
            self._break(attributes, empty, at)
        elif name == "prosody":
            self._prosody(attributes, empty, at)
        elif name == "sub":
            self._check_attributes(name, attributes, {"alias"}, at)
            if "alias" not in attributes:
                raise SsmlError(at, '<sub> needs an alias: <sub alias="what to say">text</sub>')
            for ch in _decode(attributes["alias"], at):
                self._emit(" " if ch.isspace() else ch, at, out)
            if not empty:
                self._sub = at
                self._stack.append(("sub", self.rate, at))
        elif name == "speak":
            raise SsmlError(at, "<speak> inside <speak>")
        else:
            raise SsmlError(at, f"unsupported element <{name}>; this SSML has <speak>, <break>, <prosody rate> "
                                "and <sub alias>")

    def _close(self, name: str, at: int) -> None:
        if not self._stack or self._state != "inside":
            raise SsmlError(at, f"</{name}> closes nothing")
        open_name, _, opened = self._stack[-1]
        if open_name != name:
            raise SsmlError(at, f"</{name}> where <{open_name}> (character {opened}) is still open")
        if name == "prosody":
            self._set_rate(lambda: self._stack.pop())
            return
        self._stack.pop()
        if name == "sub":
            self._sub = None
        elif name == "speak":
            self._state = "after"

    def _break(self, attributes: dict[str, str], empty: bool, at: int) -> None:
        self._check_attributes("break", attributes, {"time", "strength"}, at)
        if not empty:
            raise SsmlError(at, "<break> is empty: write <break .../>")
        if "time" in attributes:
            m = _TIME.fullmatch(attributes["time"])
            if m is None:
                raise SsmlError(at, f"break time {attributes['time']!r}: use milliseconds or seconds, e.g. "
                                    '"300ms" or "1.5s"')
            seconds = float(m.group(1)) / (1000.0 if m.group(2) == "ms" else 1.0)
        else:
            strength = attributes.get("strength", "medium")
            if strength not in STRENGTHS:
                raise SsmlError(at, f"break strength {strength!r}: one of {', '.join(STRENGTHS)}")
            seconds = STRENGTHS[strength]
        if seconds > MAX_BREAK_SECONDS:
            raise SsmlError(at, f"a break of {seconds:g} s; at most {MAX_BREAK_SECONDS:g} s")
        if seconds > 0:
            self.breaks.append(Break(self._chars, seconds))
        self._glued = at if self._last.isalnum() else None

    def _prosody(self, attributes: dict[str, str], empty: bool, at: int) -> None:
        self._check_attributes("prosody", attributes, {"rate"}, at)
        if "rate" not in attributes:
            raise SsmlError(at, '<prosody> needs a rate: <prosody rate="slow">...</prosody>')
        rate = self.rate * _rate(attributes["rate"], at)
        if not MIN_RATE <= rate <= MAX_RATE:
            raise SsmlError(at, f"a speaking rate of {rate:g} times normal; it must stay within {MIN_RATE:g} .. "
                                f"{MAX_RATE:g}")
        if not empty:
            self._set_rate(lambda: self._stack.append(("prosody", rate, at)))

    def _set_rate(self, change) -> None:
        """Apply ``change`` to the element stack, closing the span of the rate before it."""
        before = self.rate
        change()
        if self.rate != before:
            if before != 1.0 and self._chars > self._rate_start:
                self._rates.append(Rate(self._rate_start, self._chars, before))
            self._rate_start = self._chars

    @staticmethod
    def _check_attributes(name: str, attributes: dict[str, str], allowed, at: int) -> None:
        unknown = [k for k in attributes if k not in allowed]
        if unknown:
            takes = ", ".join(sorted(allowed)) if name != "speak" else "version, xmlns, xml:lang"
            raise SsmlError(at, f"<{name}> does not take {unknown[0]!r} (it takes {takes})")


class TextReader:
    """Text arriving in deltas (the text-streaming WebSocket): read as SSML once it shows it starts with
    ``<speak>`` (:func:`is_ssml`), else handed on as it is. ``push`` returns the plain text that became certain;
    ``breaks`` and ``rate_spans`` are the SSML reader's marks (none for plain text)."""

    def __init__(self) -> None:
        self._held = ""
        self._ssml: SsmlReader | None = None
        self._plain = False

    @property
    def ssml(self) -> bool:
        """Whether the text has shown itself to be SSML."""
        return self._ssml is not None

    @property
    def breaks(self) -> list[Break]:
        return self._ssml.breaks if self._ssml is not None else []

    def rate_spans(self) -> tuple[Rate, ...]:
        return self._ssml.rate_spans() if self._ssml is not None else ()

    def push(self, delta: str) -> str:
        if self._ssml is not None:
            return self._ssml.push(delta)
        if self._plain:
            return delta
        self._held += delta
        start = self._held.lstrip()
        if len(start) < len("<speak ") and "<speak".startswith(start[:6]):
            return ""  # it may still become <speak>
        held, self._held = self._held, ""
        if is_ssml(held):
            self._ssml = SsmlReader()
            return self._ssml.push(held)
        self._plain = True
        return held

    def finish(self) -> str:
        """The end of input: the text still held (plain), after the SSML reader's checks (SSML)."""
        if self._ssml is not None:
            self._ssml.finish()
            return ""
        held, self._held = self._held, ""
        if is_ssml(held):  # a whole document held back: "<speak/>"
            reader = SsmlReader()
            reader.push(held)
            reader.finish()
            return ""
        return held


def _tag_end(held: str) -> int:
    """Where the tag that starts ``held`` ends (its '>', outside quoted values); -1 if it has not all arrived."""
    quote = None
    for i, ch in enumerate(held):
        if quote:
            if ch == quote:
                quote = None
        elif ch in "\"'":
            quote = ch
        elif ch == ">":
            return i
        elif ch == "<" and i:
            return i - 1  # another '<' before this tag closed: _tag reports it malformed
    return -1


def _attributes(rest: str, at: int) -> dict[str, str]:
    out: dict[str, str] = {}
    pos = 0
    while pos < len(rest):
        m = _ATTRIBUTE.match(rest, pos)
        if m is None:
            if rest[pos:].strip():
                raise SsmlError(at, f"malformed attributes {rest.strip()[:30]!r}: write name=\"value\"")
            break
        if m.group(1) in out:
            raise SsmlError(at, f"attribute {m.group(1)!r} given twice")
        out[m.group(1)] = m.group(2)[1:-1]
        pos = m.end()
    return out


def _reference(ref: str, at: int) -> str:
    """``&name;`` or ``&#N;`` / ``&#xH;`` -> its character."""
    body = ref[1:-1]
    if body in _ENTITIES:
        return _ENTITIES[body]
    m = re.fullmatch(r"#(?:x([0-9A-Fa-f]+)|(\d+))", body)
    if m is None:
        raise SsmlError(at, f"unknown character reference {ref!r}")
    code = int(m.group(1), 16) if m.group(1) else int(m.group(2))
    if not 0 < code <= 0x10FFFF or 0xD800 <= code <= 0xDFFF:
        raise SsmlError(at, f"character reference {ref!r} is not a character")
    return chr(code)


def _decode(value: str, at: int) -> str:
    """An attribute value with its character references decoded."""
    if "&" not in value:
        return value
    out, pos = [], 0
    for m in re.finditer(r"&[^&;\s]*;?", value):
        out.append(value[pos:m.start()])
        if not m.group(0).endswith(";"):
            raise SsmlError(at, "a bare '&' in an attribute: write &amp;")
        out.append(_reference(m.group(0), at))
        pos = m.end()
    out.append(value[pos:])
    return "".join(out)


def _rate(value: str, at: int) -> float:
    """A prosody rate -> a multiplier of the normal rate."""
    key = value.strip().lower()
    if key in RATES:
        return RATES[key]
    m = _PERCENT.fullmatch(value)
    if m is not None:
        number = float(m.group(2)) / 100.0
        rate = {"+": 1.0 + number, "-": 1.0 - number, "": number}[m.group(1)]
    elif (n := _NUMBER.fullmatch(value)) is not None:
        rate = float(n.group(1))
    else:
        raise SsmlError(at, f"prosody rate {value!r}: a keyword ({', '.join(RATES)}), a percentage (\"80%\", "
                            "\"+20%\") or a multiplier (\"1.2\")")
    if rate <= 0:
        raise SsmlError(at, f"prosody rate {value!r} is not a positive rate")
    return rate
