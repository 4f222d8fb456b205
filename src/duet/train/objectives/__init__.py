"""Training objectives, one module per model family: ``codec`` (for ``codec_loop``), ``gepard`` (pretraining on
the shared ``duet.train.loop``); Luna joins later."""
