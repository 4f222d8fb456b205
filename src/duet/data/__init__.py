"""Offline speech data: a multi-speaker, multilingual corpus made from Debian packages, and its codec codes.

    text_sources.py   sentences to read: fortunes (en, es, pt-br), templates (numbers/dates, nl, ky), short words
    sources/          one module per speech source; each speaker is a frozen dataclass that renders audio
        festival.py, espeak.py          synthesisers (voice x rate x pitch = a speaker)
        asterisk.py, pocketsphinx.py    recorded prompts and their cleaned transcripts
        recorded.py, base.py            decoding recordings; the Renderer protocol and atomic WAV writing
    plan.py           CorpusPreset -> the list of utterances (text, speaker, split, path), deterministic per seed
    presets.py        `tiny` (tests) and `base` (hours, for the shipped models)
    build.py          render what is missing on all cores, then manifest.jsonl + summary.{md,json}
    manifest.py       the JSONL manifest and the text-keyed train/val/test split
    shards.py         `duet data encode`: codes in resumable safetensors shards; `CodeShards` reads them
    utterances.py     training data of any family: split and language selection, text normalisation, BPE training
    token_rows.py     the rows Luna trains on: token ids, frames, duration targets (alignment, timing or spread)
    align.py          forced alignment of text tokens to codec frames (monotonic search, flat-start EM), its file
    align_corpus.py   `duet data align`: align the rows of a coded corpus
    buckets.py        length-bucketed batch plans under a padded-positions budget (pure, seeded)
    cli.py            `duet data build | encode | align`

Audio is stored as mono 16-bit WAV at each source's native rate (16, 22.05 or 32 kHz); consumers resample on load.
"""
