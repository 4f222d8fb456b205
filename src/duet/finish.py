"""How a generation ended: one vocabulary for every family, the speakers (``Speech.ended``), the serving engine and
the API's ``finish_reason``.

- ``STOP``: the model ended it itself: Gepard's stop head, Luna Realtime's end-of-speech head, or Luna's grid
  reaching the length its duration predictor gave it;
- ``BOUND``: it ran into its frame bound first (``max_frames``, or the positions the model has);
- ``CANCELLED`` and ``ERROR``: the serving engine's, for a request the client left or a failure ended.
"""

STOP = "stop"
BOUND = "bound"
CANCELLED = "cancelled"
ERROR = "error"
REASONS = (STOP, BOUND, CANCELLED, ERROR)
