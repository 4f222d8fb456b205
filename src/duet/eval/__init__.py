"""Evaluation on top of ``duet.metrics``: test sets (``testset``), synthesis by any system (``synth``), runs and
their per-utterance scores (``run``, ``scoring``), reports (``report``), side-by-side listening (``arena``,
``bradley_terry``), WER over a manifest (``manifest_wer``), the expressive and timing evaluations, and the
``duet eval`` command (``cli``).

Importing this package imports nothing: ``duet eval`` is registered on every CLI start, and ``duet --help`` must not
pull in scipy and soundfile.
"""
