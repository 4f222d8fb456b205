"""Shared neural building blocks: the stock transformer backbone every model family runs on.

``backbone``  a stock transformers ``Qwen3Model`` built from a small frozen config, fed ``inputs_embeds``
"""
