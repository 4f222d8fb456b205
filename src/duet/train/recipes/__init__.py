"""One training recipe per ``duet train`` stage: flags -> config dataclasses -> the shared loop, and its export.

``gepard``         ``duet train gepard`` / ``gepard-export``
``luna``           ``duet train luna`` / ``luna-export`` (and the Luna driver the Realtime recipe reuses)
``luna_realtime``  ``duet train luna-realtime`` / ``luna-realtime-export`` (continual training from a Luna model)

Each module also runs as ``python -m duet.train.recipes.NAME STAGE ...`` (what ``torchrun`` launches).
"""
