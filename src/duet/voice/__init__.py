"""Your own voice: ``duet voice train DATA --out VOICE`` turns a folder of recordings with transcripts into a Gepard
voice that ``duet speak --model VOICE``, the speech API and ``duet serve`` load like a shipped model.

The recipe, one module per step (``duet.voice.recipe`` runs them in order, each resumable):

- ``sources``: what DATA holds (the LJSpeech layout, ``NAME.wav`` + ``NAME.txt`` pairs, or a duet manifest) -> clips;
- ``checks`` + ``prepare``: every clip read, checked and prepared (mono, the codec's rate, trimmed, loudness
  normalised) into a corpus of the build directory; the text normalised and phonemised for the language;
- ``align``: duet's forced aligner (``duet.data.align``) lays each clip's phonemes over its frames and writes the
  timing sidecars aligned text input trains on (real recordings carry no synthesiser timing);
- ``report``: every clip that cannot be used, with its reason, in a report file;
- ``language``: the espeak-ng voice, Whisper language and tokenizer of a language;
- ``budget``: the wall-clock budget, and how many training steps fit in it;
- ``decoder``: the codec's decoder fine-tuned on the voice's clips, the voice's own (``VOICE/codec``);
- ``evaluate``: held-out WER and speaker similarity of the voice, the recordings and the base model (``duet eval``);
- ``card``: the exported voice's card (data, budget, scores).

Training itself is ``duet train gepard``'s recipe (``duet.train.recipes.gepard``) warm-started from the shipped
gepard-clone-tiny, with the codec's decoder fine-tuned beside it (``decoder``), and the export is its shipped format
(``duet.gepard.checkpoint``).
"""
