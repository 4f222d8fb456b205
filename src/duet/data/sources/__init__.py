"""Speech sources: synthesisers (`festival`, `espeak`) and recordings (`asterisk`, `pocketsphinx`, decoded by
`recorded`). Each speaker is a small frozen dataclass implementing `base.Renderer`."""
