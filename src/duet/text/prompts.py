"""A request's text as a model reads it: prepared, tokenised and wrapped in the family's service tokens.

Training data (``duet.gepard.data``, ``duet.luna.data``) and inference (``duet.tts``, ``duet.serve``) both wrap text
here, so a model is fed at inference exactly what it was trained on. The two wraps::

    Gepard   SOT  t_1 .. t_n  EOT  SOS         (SOS: the position that predicts the first audio frame)
    Luna     SOT  [E]  t_1 .. t_n  EOT         (the audio grid follows; its own embeddings mark where audio starts)

``[E]`` is the instruction context (Luna-TTS §2.3): the utterance-level emotion token ``<|emo_happy|>`` when the
utterance has an emotion, else nothing, so a text without one is wrapped exactly as before emotions existed. It sits
where ``duet.text.tags.with_emotion`` writes it, in front of the text, and is added as an id rather than written into
the text: the text's own ids are the same with and without an emotion (a phoneme tokenizer would otherwise read the
space after the token as part of the first word). Inline event tags (``[laughter]``) stay in the text, where the
tokenizer reads each as one service id.

Service token ids come from the tokenizer (``duet.text.tokens.service_ids``), never hard-coded.
"""

from __future__ import annotations

from typing import Sequence

from duet.text.normalize import normalize_text
from duet.text.tokens import service_ids


def is_english(language: str) -> bool:
    return language == "en" or language.startswith("en-")


def prepare_input(text: str, language: str = "en", normalize: bool = True) -> str:
    """Text as a model reads it: stripped, and normalised when English (and ``normalize``; the normaliser is
    English-only)."""
    text = text.strip()
    return normalize_text(text) if normalize and is_english(language) else text


def instruction_ids(service, emotion: str | None) -> list[int]:
    """The instruction context's ids: the emotion token's when ``emotion`` is set (one of ``EMOTIONS``), else none."""
    return [] if emotion is None else [service.emotion(emotion)]


def wrap_ids(token_ids: Sequence[int], service, *, start_of_speech: bool, emotion: str | None = None) -> list[int]:
    """[SOT, *instruction, *text, EOT] and, when ``start_of_speech`` (Gepard), SOS; ``service`` is
    ``service_ids(tokenizer)``; the instruction is :func:`instruction_ids` of ``emotion``."""
    return [service.sot, *instruction_ids(service, emotion), *token_ids, service.eot,
            *([service.sos] if start_of_speech else [])]


def encode_prompt(text: str, tokenizer, *, start_of_speech: bool, language: str = "en",
                  normalize: bool = True, emotion: str | None = None) -> list[int]:
    """What a model is fed for ``text``: prepared as in training, tokenised, wrapped (:func:`wrap_ids`)."""
    ids = tokenizer.encode(prepare_input(text, language, normalize), add_special_tokens=False)
    return wrap_ids(ids, service_ids(tokenizer), start_of_speech=start_of_speech, emotion=emotion)


def gepard_prompt(text: str, tokenizer, *, language: str = "en", normalize: bool = True) -> list[int]:
    """Gepard's prompt ids: [SOT, text, EOT, SOS]."""
    return encode_prompt(text, tokenizer, start_of_speech=True, language=language, normalize=normalize)


def luna_prompt(text: str, tokenizer, *, language: str = "en", normalize: bool = True,
                emotion: str | None = None) -> list[int]:
    """Luna's (and Luna Realtime's) prompt ids: [SOT, text, EOT], or [SOT, emotion, text, EOT] with ``emotion``."""
    return encode_prompt(text, tokenizer, start_of_speech=False, language=language, normalize=normalize,
                         emotion=emotion)
